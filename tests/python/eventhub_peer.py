"""The official Python `azure-eventhub` package as a peer of `hubhost hub`.

Usage: eventhub_peer.py <connection string> <hub> <operation> [args...]; prints JSON on stdout.
The connection string is the one users write for the official emulator
(`...;UseDevelopmentEmulator=true;`), used as it is.

  props                              hub and partition properties
  send <count> <batch> <tag>         sends events in batches keyed by home; properties carry i and tag
  send-to <partition> <count> <tag>  sends events one by one to a partition
  send-keyed <key> <body>...         sends the bodies as one batch with that partition key
  receive <group> <expect> <seconds> receives from every partition from the start
  receive-checkpointed <group> <expect> <seconds> <storage connection string> <container>
                                     the same through BlobCheckpointStore, checkpointing every event
  steal <partition> <seconds>        a receiver with owner level 1, then one with level 2: the first's error
  oversize                           tries to send an event of 1 MB + 1 byte
  send-varied <partition>            sends to a partition: a binary body, a JSON body with typed
                                     properties, a text body made of HTML, and a 900,000-byte text
  send-large <partition> <count> <bytes>
                                     sends events of that many bytes each to a partition
  send-large-properties <partition> <count> <bytes>
                                     sends events of a one-byte body and a property of that many bytes
"""

import json
import sys
import threading
import time

from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient


def props(cs, hub):
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
        info = producer.get_eventhub_properties()
        partitions = [producer.get_partition_properties(p) for p in info["partition_ids"]]
    return {
        "name": info["eventhub_name"],
        "partition_ids": info["partition_ids"],
        "partitions": [
            {
                "id": p["id"],
                "begin": p["beginning_sequence_number"],
                "last": p["last_enqueued_sequence_number"],
                "last_offset": p["last_enqueued_offset"],
                "empty": p["is_empty"],
            }
            for p in partitions
        ],
    }


def send(cs, hub, count, batch_size, tag):
    sent = 0
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
        while sent < count:
            home = f"home-{sent % 37:05d}"
            batch = producer.create_batch(partition_key=home)
            for _ in range(min(batch_size, count - sent)):
                event = EventData(json.dumps({"home": home, "i": sent}))
                event.properties = {"i": sent, "tag": tag}
                batch.add(event)
                sent += 1
            producer.send_batch(batch)
    return {"sent": sent}


def send_to(cs, hub, partition, count, tag):
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
        for i in range(count):
            event = EventData(f"{tag}-{i}")
            event.properties = {"i": i, "tag": tag}
            producer.send_event(event, partition_id=partition)
    return {"sent": count}


def send_keyed(cs, hub, key, bodies):
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
        batch = producer.create_batch(partition_key=key)
        for body in bodies:
            batch.add(EventData(body))
        producer.send_batch(batch)
    return {"sent": len(bodies)}


def send_varied(cs, hub, partition):
    json_event = EventData(json.dumps({"kind": "json", "n": 7}))
    json_event.properties = {"kind": "json", "n": 7, "flag": True}
    json_event.content_type = "application/json"
    events = [
        EventData(bytes(range(256))),
        json_event,
        EventData("<b>bold</b> & <script>alert(1)</script>"),
        EventData("L" * 900_000),
    ]
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
        for event in events:
            producer.send_event(event, partition_id=partition)
    return {"sent": len(events)}


def _event_json(partition_id, event):
    properties = {k.decode() if isinstance(k, bytes) else k: v for k, v in (event.properties or {}).items()}
    tag = properties.get("tag")
    return {
        "partition": partition_id,
        "sequence": event.sequence_number,
        "offset": event.offset,
        "key": event.partition_key.decode() if isinstance(event.partition_key, bytes) else event.partition_key,
        "i": properties.get("i"),
        "tag": tag.decode() if isinstance(tag, bytes) else tag,
        "body": _body_text(event),
    }


def _body_text(event):
    """The body as text; a body that is not UTF-8 as `hex:` and its bytes."""
    try:
        return event.body_as_str()
    except TypeError:
        return "hex:" + b"".join(event.body).hex()


def receive(cs, hub, group, expect, seconds, checkpoint_store=None):
    received = []
    done = threading.Event()
    client = EventHubConsumerClient.from_connection_string(
        cs, consumer_group=group, eventhub_name=hub, checkpoint_store=checkpoint_store,
        load_balancing_interval=1,
    )

    # receive_batch: the synchronous processor visits partitions in turn, and with receive() it
    # takes one event per partition per visit, waiting on every idle partition in between.
    def on_batch(context, events):
        for event in events:
            received.append(_event_json(context.partition_id, event))
        if checkpoint_store is not None and events:
            context.update_checkpoint(events[-1])
        if len(received) >= expect:
            done.set()

    worker = threading.Thread(
        target=lambda: client.receive_batch(
            on_event_batch=on_batch, max_batch_size=300, max_wait_time=0.5, starting_position="-1"
        ),
        daemon=True,
    )
    worker.start()
    done.wait(seconds)
    client.close()
    worker.join(10)
    return received


def steal(cs, hub, partition, seconds):
    errors = []
    received = {"first": 0, "second": 0}

    def consumer(name, level):
        client = EventHubConsumerClient.from_connection_string(cs, consumer_group="$Default", eventhub_name=hub)

        def on_event(context, event):
            received[name] += 1

        def on_error(context, error):
            errors.append({"consumer": name, "type": type(error).__name__, "message": str(error)})

        thread = threading.Thread(
            target=lambda: client.receive(
                on_event=on_event, on_error=on_error, partition_id=partition,
                owner_level=level, starting_position="-1",
            ),
            daemon=True,
        )
        thread.start()
        return client, thread

    first = consumer("first", 1)
    time.sleep(seconds)
    second = consumer("second", 2)
    time.sleep(seconds)
    for client, thread in (first, second):
        client.close()
        thread.join(10)
    return {"errors": errors, "received": received}


def oversize(cs, hub):
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
        try:
            producer.send_event(EventData(b"x" * (1024 * 1024 + 1)), partition_id="0")
            return {"refused": False}
        except Exception as error:  # the SDK refuses it by the link's max message size
            return {"refused": True, "type": type(error).__name__, "message": str(error)}


def send_large(cs, hub, partition, count, size):
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
        for i in range(count):
            producer.send_event(EventData(bytes([i % 256]) * size), partition_id=partition)
    return {"sent": count}


def send_large_properties(cs, hub, partition, count, size):
    """Events of a one-byte body and one application property of `size` bytes."""
    with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
        for i in range(count):
            event = EventData(b"x")
            event.properties = {"blob": chr(ord("a") + i % 26) * size}
            producer.send_event(event, partition_id=partition)
    return {"sent": count}


def main():
    cs, hub, op, *args = sys.argv[1:]
    if op == "props":
        out = props(cs, hub)
    elif op == "send":
        out = send(cs, hub, int(args[0]), int(args[1]), args[2])
    elif op == "send-to":
        out = send_to(cs, hub, args[0], int(args[1]), args[2])
    elif op == "send-keyed":
        out = send_keyed(cs, hub, args[0], args[1:])
    elif op == "receive":
        out = receive(cs, hub, args[0], int(args[1]), float(args[2]))
    elif op == "receive-checkpointed":
        from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

        store = BlobCheckpointStore.from_connection_string(args[3], args[4])
        out = receive(cs, hub, args[0], int(args[1]), float(args[2]), checkpoint_store=store)
    elif op == "steal":
        out = steal(cs, hub, args[0], float(args[1]))
    elif op == "oversize":
        out = oversize(cs, hub)
    elif op == "send-varied":
        out = send_varied(cs, hub, args[0])
    elif op == "send-large":
        out = send_large(cs, hub, args[0], int(args[1]), int(args[2]))
    elif op == "send-large-properties":
        out = send_large_properties(cs, hub, args[0], int(args[1]), int(args[2]))
    else:
        raise SystemExit(f"unknown operation {op}")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
