"""The connection recipes the README and docs/hub.md give, used as written by the official clients
against `hubhost hub` started with its documented defaults. Prints JSON on stdout.

Usage:
  recipe_peer.py amqp <connection string> <client options JSON>
      azure-eventhub: sends one event to partition 0 of `sensors` and reads it back (from the
      partition's end before the send), with the options users hand the clients:
        {"custom_endpoint_address": "sb://localhost:5443",
         "transport": "amqp" | "websocket",
         "connection_verify": "hubhost-data/tls/ca.pem"}
      prints {"sent": tag, "received": [bodies read after it]}
  kafka <properties file>
      confluent-kafka (librdkafka) configured from a Java-style properties file as the README
      shows it: produces one record to `sensors` and reads it back by a consumer group;
      prints {"sent": value, "received": value or null}
"""

import json
import sys
import threading
import uuid

from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient

from transports_peer import client_options

SECONDS = 60


def amqp(cs, options):
    kwargs = client_options(options)
    tag = f"recipe-{uuid.uuid4()}"
    with EventHubProducerClient.from_connection_string(cs, eventhub_name="sensors", **kwargs) as producer:
        before = producer.get_partition_properties("0")["last_enqueued_sequence_number"]
        producer.send_event(EventData(tag), partition_id="0")
    received = []
    consumer = EventHubConsumerClient.from_connection_string(cs, "$Default", eventhub_name="sensors", **kwargs)

    def on_event(_context, event):
        if event is None:
            return
        received.append(event.body_as_str())
        if event.body_as_str() == tag:
            threading.Thread(target=consumer.close).start()

    timer = threading.Timer(SECONDS, consumer.close)
    timer.start()
    with consumer:
        consumer.receive(on_event, partition_id="0", starting_position=before,
                         starting_position_inclusive=False)
    timer.cancel()
    return {"sent": tag, "received": received}


def properties(path):
    config = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            config[key.strip()] = value.strip()
    return config


def kafka(path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    config = properties(path)
    value = f"recipe-{uuid.uuid4()}"
    placed = {}

    def delivered(error, message):
        placed["error"] = None if error is None else str(error)
        if error is None:
            placed["partition"] = message.partition()
            placed["offset"] = message.offset()

    producer = Producer(config)
    producer.produce("sensors", value=value.encode(), partition=0, on_delivery=delivered)
    producer.flush(SECONDS)
    if placed.get("error") or "offset" not in placed:
        return {"sent": value, "received": None, "error": placed.get("error", "no delivery report")}
    consumer = Consumer(dict(config, **{"group.id": f"recipe-{uuid.uuid4()}", "enable.auto.commit": False}))
    consumer.assign([TopicPartition("sensors", placed["partition"], placed["offset"])])
    received = None
    for _ in range(SECONDS):
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            received = message.value().decode()
            break
    consumer.close()
    return {"sent": value, "received": received}


def main():
    op = sys.argv[1]
    if op == "amqp":
        result = amqp(sys.argv[2], sys.argv[3])
    elif op == "kafka":
        result = kafka(sys.argv[2])
    else:
        raise SystemExit(f"unknown operation {op}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
