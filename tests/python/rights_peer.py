"""Official clients trying what a key's rights allow, or not, on `hubhost hub`. Each operation
prints JSON {"ok": bool, "error": str or null}: ok when the client did what it was asked.

Usage:
  rights_peer.py amqp-send <connection string> <hub>
      azure-eventhub sends one event
  rights_peer.py amqp-receive <connection string> <hub>
      azure-eventhub receives from partition 0 from the start (ok once it receives an event)
  rights_peer.py kafka-produce <bootstrap> <connection string> <topic>
      confluent-kafka (librdkafka) produces one record
  rights_peer.py kafka-consume <bootstrap> <connection string> <topic> <group>
      confluent-kafka joins the group subscribed to the topic, consumes and commits (ok once a
      record arrives and its offset is committed)
"""

import json
import sys
import threading
import time

SECONDS = 15


def amqp_send(cs, hub):
    from azure.eventhub import EventData, EventHubProducerClient

    try:
        with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
            producer.send_event(EventData("rights"), partition_id="0")
        return {"ok": True, "error": None}
    except Exception as e:  # the client's own error, as a user sees it
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def amqp_receive(cs, hub):
    from azure.eventhub import EventHubConsumerClient

    outcome = {"ok": False, "error": None}
    done = threading.Event()
    client = EventHubConsumerClient.from_connection_string(cs, consumer_group="$Default", eventhub_name=hub)

    def on_event(_context, event):
        if event is not None:
            outcome["ok"] = True
            done.set()

    def on_error(_context, error):
        outcome["error"] = f"{type(error).__name__}: {error}"
        done.set()

    thread = threading.Thread(
        target=lambda: client.receive(
            on_event=on_event, on_error=on_error, partition_id="0", starting_position="-1"
        ),
        daemon=True,
    )
    thread.start()
    done.wait(SECONDS)
    client.close()
    thread.join(10)
    if not outcome["ok"] and outcome["error"] is None:
        outcome["error"] = f"nothing received within {SECONDS} s"
    return outcome


def kafka_config(bootstrap, cs):
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "$ConnectionString",
        "sasl.password": cs,
    }


def kafka_produce(bootstrap, cs, topic):
    from confluent_kafka import Producer

    report = {}

    def delivered(error, _message):
        report["error"] = None if error is None else str(error)

    producer = Producer({**kafka_config(bootstrap, cs), "message.timeout.ms": 10000})
    producer.produce(topic, value=b"rights", partition=0, on_delivery=delivered)
    producer.flush(20)
    error = report.get("error", "no delivery report")
    return {"ok": error is None, "error": error}


def kafka_consume(bootstrap, cs, topic, group):
    from confluent_kafka import Consumer

    consumer = Consumer({
        **kafka_config(bootstrap, cs),
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    deadline = time.monotonic() + SECONDS
    outcome = {"ok": False, "error": None}
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            outcome["error"] = str(message.error())
            if message.error().fatal() or "AUTHORIZATION" in outcome["error"].upper():
                break
            continue
        try:
            consumer.commit(message=message, asynchronous=False)
            outcome = {"ok": True, "error": None}
        except Exception as e:  # the commit's own error
            outcome["error"] = f"commit: {e}"
        break
    consumer.close()
    if not outcome["ok"] and outcome["error"] is None:
        outcome["error"] = f"nothing consumed within {SECONDS} s"
    return outcome


def main():
    op, *args = sys.argv[1:]
    operations = {
        "amqp-send": amqp_send,
        "amqp-receive": amqp_receive,
        "kafka-produce": kafka_produce,
        "kafka-consume": kafka_consume,
    }
    if op not in operations:
        raise SystemExit(f"unknown operation {op}")
    print(json.dumps(operations[op](*args)))


if __name__ == "__main__":
    main()
