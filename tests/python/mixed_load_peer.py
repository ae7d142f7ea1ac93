"""Mixed load on `hubhost hub` for a kill -9 in the middle of it: librdkafka's idempotent
producer and azure-eventhub's batches sending unique values at once, then every acknowledged
value looked for in what the hub stored. Prints JSON.

Usage (each producer in a process of its own, so that neither starves the other of Python's
interpreter lock):
  mixed_load_peer.py load-kafka|load-amqp <connection string> <bootstrap> <hub> <seconds> <acked file>
      one producer for <seconds> (Kafka paced at 20,000 records/s; a client whose send fails goes on once the hub is back; the
      Kafka producer flushes at the end); the values it acknowledged go to <acked file>
  mixed_load_peer.py verify <connection string> <bootstrap> <hub> <partitions> <acked files prefix>
      every partition read from the start with librdkafka: the values of <prefix>kafka.json and
      <prefix>amqp.json not stored, and those stored more than once
"""

import json
import sys
import threading
import time

from kafka_peer import confluent_config as kafka_config

KAFKA_RECORDS_PER_SECOND = 20_000


def load_kafka(cs, bootstrap, hub, seconds):
    from confluent_kafka import Producer

    acked, errors = [], []
    producer = Producer(
        kafka_config(bootstrap, cs, **{"enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000})
    )

    def delivered(error, message):
        if error is None:
            acked.append(message.value().decode())
        else:
            errors.append(f"kafka: {error}")

    i = 0
    started = time.monotonic()
    until = started + seconds
    while time.monotonic() < until:
        # Paced, so that the AMQP producer beside it gets its share of two cores.
        if i > KAFKA_RECORDS_PER_SECOND * (time.monotonic() - started):
            producer.poll(0.01)
            continue
        try:
            producer.produce(hub, value=f"k-{i}".encode(), key=f"home-{i % 50}".encode(), on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    return acked, errors


def load_amqp(cs, hub, seconds):
    from azure.eventhub import EventData, EventHubProducerClient

    acked, errors = [], []
    i = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
                while time.monotonic() < until:
                    batch, bodies = producer.create_batch(), []
                    for _ in range(100):
                        body = f"a-{i}"
                        i += 1
                        batch.add(EventData(body))
                        bodies.append(body)
                    producer.send_batch(batch)
                    acked.extend(bodies)
        except Exception as e:  # the hub went away: connect again
            errors.append(f"amqp: {type(e).__name__}")
            time.sleep(0.2)
    return acked, errors


def verify(cs, bootstrap, hub, partitions, acked_file):
    from confluent_kafka import Consumer, TopicPartition

    acked = {}
    for protocol in ("kafka", "amqp"):
        with open(f"{acked_file}{protocol}.json") as f:
            acked[protocol] = json.load(f)
    consumer = Consumer(kafka_config(bootstrap, cs, **{"group.id": "verify", "enable.auto.commit": False}))
    ends = {p: consumer.get_watermark_offsets(TopicPartition(hub, p), timeout=20)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(hub, p, 0) for p in range(partitions)])
    done = {p: ends[p] == 0 for p in range(partitions)}
    stored = {}
    deadline = time.monotonic() + 300
    while not all(done.values()) and time.monotonic() < deadline:
        for message in consumer.consume(10000, 1.0):
            if message.error():
                continue
            value = message.value().decode()
            stored[value] = stored.get(value, 0) + 1
            if message.offset() + 1 >= ends[message.partition()]:
                done[message.partition()] = True
    consumer.close()
    out = {"stored": sum(stored.values()), "read_to_the_end": all(done.values())}
    for protocol in ("kafka", "amqp"):
        values = acked[protocol]
        out[f"{protocol}_acked"] = len(values)
        out[f"{protocol}_lost"] = [v for v in values if v not in stored][:10]
        out[f"{protocol}_duplicated"] = sorted(v for v in set(values) if stored.get(v, 0) > 1)[:200]
    return out


def main():
    op, cs, bootstrap, hub, number, acked_file = sys.argv[1:]
    if op in ("load-kafka", "load-amqp"):
        if op == "load-kafka":
            acked, errors = load_kafka(cs, bootstrap, hub, float(number))
        else:
            acked, errors = load_amqp(cs, hub, float(number))
        with open(acked_file, "w") as out_file:
            json.dump(acked, out_file)
        out = {"acked": len(acked), "errors": errors[:5], "error_count": len(errors)}
    elif op == "verify":
        out = verify(cs, bootstrap, hub, int(number), acked_file)
    else:
        raise SystemExit(f"unknown operation {op}")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
