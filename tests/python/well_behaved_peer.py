"""Well-behaved clients beside an attack on `hubhost hub`: each does one small thing with an
official client and says how long the client took (not Python's start-up). Prints JSON:
{"ok": bool, "seconds": float, "error": str or null}.

Usage:
  well_behaved_peer.py amqp <connection string> <hub>
      azure-eventhub sends one event
  well_behaved_peer.py kafka <bootstrap> <connection string> <topic>
      confluent-kafka (librdkafka) produces one record, SASL PLAIN with the connection string
"""

import json
import sys
import time


def amqp(cs, hub):
    from azure.eventhub import EventData, EventHubProducerClient

    started = time.monotonic()
    try:
        with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
            producer.send_event(EventData("well-behaved"))
        return {"ok": True, "seconds": time.monotonic() - started, "error": None}
    except Exception as e:  # the client's own error, as a user sees it
        return {"ok": False, "seconds": time.monotonic() - started, "error": f"{type(e).__name__}: {e}"}


def kafka(bootstrap, cs, topic):
    from confluent_kafka import Producer

    started = time.monotonic()
    report = {}

    def delivered(error, _message):
        report["error"] = None if error is None else str(error)

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "$ConnectionString",
        "sasl.password": cs,
        "message.timeout.ms": 20000,
    })
    producer.produce(topic, value=b"well-behaved", on_delivery=delivered)
    producer.flush(30)
    error = report.get("error", "no delivery report")
    return {"ok": error is None, "seconds": time.monotonic() - started, "error": error}


def main():
    op = sys.argv[1]
    if op == "amqp":
        result = amqp(sys.argv[2], sys.argv[3])
    elif op == "kafka":
        result = kafka(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(f"unknown operation {op}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
