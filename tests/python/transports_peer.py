"""The official Python `azure-eventhub` package on `hubhost hub` over TLS and WebSockets, and with
the last enqueued event's properties tracked. Prints JSON on stdout.

Usage: transports_peer.py <connection string> <hub> <client options JSON> <operation> [args...]

The client options are what users hand the SDK's clients to reach a namespace this way:
  {"custom_endpoint_address": "sb://localhost:5671",  where to connect
   "transport": "amqp" | "websocket",                  TransportType.Amqp or AmqpOverWebsocket
   "connection_verify": "/path/to/ca.pem"}             the certificate authority to trust

  roundtrip <tag>        a sync and an async producer each send one event to partition 0; a
                         sync and an async consumer read partition 0 from the start until both
                         arrive, tracking the last enqueued event's properties
  track <expect> <on>    sends <expect> events to partition 1, then reads them back with
                         track_last_enqueued_event_properties=<on> (true/false): per event the
                         properties the consumer saw (each event carries a delivery annotation
                         of its sender's, `sender_note`, read back beside them), and the
                         partition's own at the end
  refused                one management call with no retries: the error the client reports
  idle <seconds>         a sync and an async producer each send, sleep that long, and send again:
                         how long each send took, or the error
"""

import asyncio
import json
import sys
import threading
import time

from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient, TransportType
from azure.eventhub.aio import EventHubConsumerClient as AsyncConsumer
from azure.eventhub.aio import EventHubProducerClient as AsyncProducer

RECEIVE_SECONDS = 60
# A delivery annotation `track` puts on every event it sends: a receiver tracking the last
# enqueued event's properties must get it beside them.
SENDER_NOTE = b"x-sender-note"


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def client_options(text):
    options = json.loads(text)
    kwargs = {}
    if "custom_endpoint_address" in options:
        kwargs["custom_endpoint_address"] = options["custom_endpoint_address"]
    if options.get("transport") == "websocket":
        kwargs["transport_type"] = TransportType.AmqpOverWebsocket
    else:
        kwargs["transport_type"] = TransportType.Amqp
    if "connection_verify" in options:
        kwargs["connection_verify"] = options["connection_verify"]
    return kwargs


def millis(when):
    return None if when is None else int(when.timestamp() * 1000)


def last_enqueued(context):
    props = context.last_enqueued_event_properties
    if not props:
        return None
    return {
        "sequence_number": props["sequence_number"],
        "offset": props["offset"],
        "enqueued_time": millis(props["enqueued_time"]),
        "retrieval_time": millis(props["retrieval_time"]),
    }


def receive_sync(cs, hub, kwargs, partition, expect, track):
    got = []
    consumer = EventHubConsumerClient.from_connection_string(cs, "$Default", eventhub_name=hub, **kwargs)

    def on_event(context, event):
        if event is None:
            return
        annotations = event.raw_amqp_message.delivery_annotations or {}
        got.append({"body": event.body_as_str(), "sequence_number": event.sequence_number,
                    "last_enqueued": last_enqueued(context),
                    "sender_note": text(annotations.get(SENDER_NOTE))})
        if len(got) >= expect:
            threading.Thread(target=consumer.close).start()

    timer = threading.Timer(RECEIVE_SECONDS, consumer.close)
    timer.start()
    with consumer:
        consumer.receive(on_event, partition_id=partition, starting_position="-1",
                         track_last_enqueued_event_properties=track)
    timer.cancel()
    return got


async def receive_async(cs, hub, kwargs, partition, expect):
    got = []
    done = asyncio.Event()
    consumer = AsyncConsumer.from_connection_string(cs, "$Default", eventhub_name=hub, **kwargs)

    async def on_event(context, event):
        got.append({"body": event.body_as_str(), "last_enqueued": last_enqueued(context)})
        if len(got) >= expect:
            done.set()

    async with consumer:
        task = asyncio.create_task(consumer.receive(
            on_event, partition_id=partition, starting_position="-1",
            track_last_enqueued_event_properties=True))
        try:
            await asyncio.wait_for(done.wait(), RECEIVE_SECONDS)
        except asyncio.TimeoutError:
            pass
        await consumer.close()
        task.cancel()
    return got


def roundtrip(cs, hub, kwargs, tag):
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub, **kwargs) as producer:
        producer.send_event(EventData(f"{tag}-sync"), partition_id="0")

    async def send_async():
        async with AsyncProducer.from_connection_string(cs, eventhub_name=hub, **kwargs) as producer:
            await producer.send_event(EventData(f"{tag}-async"), partition_id="0")
            return await producer.get_partition_properties("0")

    partition = asyncio.run(send_async())
    sync_got = receive_sync(cs, hub, kwargs, "0", 2, True)
    async_got = asyncio.run(receive_async(cs, hub, kwargs, "0", 2))
    return {
        "sync": [e["body"] for e in sync_got],
        "async": [e["body"] for e in async_got],
        "last_enqueued": [e["last_enqueued"] for e in sync_got + async_got],
        "partition_last": partition["last_enqueued_sequence_number"],
    }


def track(cs, hub, kwargs, expect, on):
    before = int(time.time() * 1000)
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub, **kwargs) as producer:
        batch = producer.create_batch(partition_id="1")
        for i in range(expect):
            event = EventData(f"event-{i}")
            event.raw_amqp_message.delivery_annotations = {SENDER_NOTE: f"note-{i}"}
            batch.add(event)
        producer.send_batch(batch)
        partition = producer.get_partition_properties("1")
    got = receive_sync(cs, hub, kwargs, "1", expect, on)
    return {
        "sent_after": before,
        "events": got,
        "partition": {
            "last_enqueued_sequence_number": partition["last_enqueued_sequence_number"],
            "last_enqueued_offset": partition["last_enqueued_offset"],
            "last_enqueued_time": millis(partition["last_enqueued_time_utc"]),
        },
    }


def refused(cs, hub, kwargs):
    try:
        with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub, retry_total=0, **kwargs) as producer:
            producer.get_eventhub_properties()
        return {"error": None}
    except Exception as e:  # the client's own error, as a user sees it
        return {"error": f"{type(e).__name__}: {e}"}


def idle(cs, hub, kwargs, seconds):
    def timed(send):
        started = time.time()
        try:
            send()
            return {"seconds": time.time() - started}
        except Exception as e:  # what the SDK reports after the idle time
            return {"error": f"{type(e).__name__}: {e}"}

    result = {}
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub, **kwargs) as producer:
        first = timed(lambda: producer.send_event(EventData("before"), partition_id="0"))
        time.sleep(seconds)
        result["sync"] = [first, timed(lambda: producer.send_event(EventData("after"), partition_id="0"))]

    async def run_async():
        async with AsyncProducer.from_connection_string(cs, eventhub_name=hub, **kwargs) as producer:
            started = time.time()
            await producer.send_event(EventData("before"), partition_id="1")
            first = {"seconds": time.time() - started}
            await asyncio.sleep(seconds)
            started = time.time()
            try:
                await producer.send_event(EventData("after"), partition_id="1")
                return [first, {"seconds": time.time() - started}]
            except Exception as e:
                return [first, {"error": f"{type(e).__name__}: {e}"}]

    result["async"] = asyncio.run(run_async())
    return result


def main():
    cs, hub, options, op, *args = sys.argv[1:]
    kwargs = client_options(options)
    if op == "roundtrip":
        result = roundtrip(cs, hub, kwargs, args[0])
    elif op == "track":
        result = track(cs, hub, kwargs, int(args[0]), args[1] == "true")
    elif op == "idle":
        result = idle(cs, hub, kwargs, float(args[0]))
    elif op == "refused":
        result = refused(cs, hub, kwargs)
    else:
        raise SystemExit(f"unknown operation {op}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
