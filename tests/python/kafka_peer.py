"""Kafka clients from PyPI as peers of `hubhost hub`'s Kafka endpoint: confluent-kafka
(librdkafka) and kafka-python (pure Python), configured as for Event Hubs' Kafka endpoint
(SASL_PLAINTEXT, PLAIN, user `$ConnectionString`, the connection string as the password).

Usage: kafka_peer.py <operation> <bootstrap> <connection string> [args...]; prints JSON.

  produce <client> <topic> <count> <tag> <compression>
                     keyed records (home-<i % 50>) with headers i and tag; each one's partition and offset
  produce-readings <topic> <count>
                     sensor readings of the reference app (JSON values keyed by home) with librdkafka
  consume <client> <topic> <group> <expect> <seconds>
                     a group member reading from the committed offsets (or the start), committing
                     after each record (a failed commit is tried again, and listed in
                     commit_errors); stops at <expect> records or after <seconds>
  eh-receive <hub> <expect> <seconds>
                     the Event Hubs SDK (azure-eventhub) reading every partition from the start, with
                     each event's Kafka key (x-opt-kafka-key) and properties; <bootstrap> unused
  oauth-produce <identity header> <ca file> <topic>
                     librdkafka with OAUTHBEARER, each token from the managed identity endpoint
                     given in place of the connection string; what it placed, or its errors
  refused <topic> <case>
                     what the client reports: produce to <topic> (unknown, not granted, too large)
"""

import json
import sys
import time


def confluent_config(bootstrap, password, **more):
    config = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "$ConnectionString",
        "sasl.password": password,
    }
    config.update(more)
    return config


def kafka_python_config(bootstrap, password):
    return dict(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="$ConnectionString",
        sasl_plain_password=password,
    )


def record(i, tag):
    key = f"home-{i % 50}".encode()
    value = f"{tag}-{i}".encode()
    headers = [("i", str(i).encode()), ("tag", tag.encode())]
    return key, value, headers


def produce(client, bootstrap, password, topic, count, tag, compression):
    placed = []
    if client == "confluent":
        from confluent_kafka import Producer

        producer = Producer(
            confluent_config(
                bootstrap, password, **{"compression.type": compression, "enable.idempotence": True, "linger.ms": 5}
            )
        )
        errors = []

        def delivered(error, message):
            if error is not None:
                errors.append(str(error))
            else:
                placed.append({"partition": message.partition(), "offset": message.offset(), "key": message.key().decode()})

        for i in range(count):
            key, value, headers = record(i, tag)
            producer.produce(topic, value=value, key=key, headers=headers, on_delivery=delivered)
            producer.poll(0)
        producer.flush(60)
        if errors:
            return {"errors": errors}
    else:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            **kafka_python_config(bootstrap, password),
            compression_type=None if compression == "none" else compression,
        )
        futures = []
        for i in range(count):
            key, value, headers = record(i, tag)
            futures.append((key, producer.send(topic, value=value, key=key, headers=headers)))
        for key, future in futures:
            metadata = future.get(timeout=60)
            placed.append({"partition": metadata.partition, "offset": metadata.offset, "key": key.decode()})
        producer.close()
    return {"placed": placed}


def produce_readings(bootstrap, password, topic, count):
    from datetime import datetime, timezone

    from confluent_kafka import Producer

    producer = Producer(confluent_config(bootstrap, password, **{"linger.ms": 5, "compression.type": "lz4"}))
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    errors = []
    for i in range(count):
        home = f"home-{i % 40:05d}"
        value = json.dumps({"homeId": home, "sensorId": f"kafka-{i}", "type": "smoke", "state": "ok", "ts": now})
        producer.produce(
            topic,
            key=home.encode(),
            value=value.encode(),
            on_delivery=lambda error, message: errors.append(str(error)) if error else None,
        )
        producer.poll(0)
    producer.flush(60)
    return {"sent": count - len(errors), "errors": errors}


def consume(client, bootstrap, password, topic, group, expect, seconds):
    records = []
    assignments = []
    commit_errors = []
    deadline = time.time() + seconds
    if client == "confluent":
        from confluent_kafka import Consumer, KafkaException

        # A commit that fails (the coordinator refuses it while the group rebalances, or its
        # answer is late on a loaded machine) is tried again after the next poll while the member
        # holds the partition, as Kafka's documentation tells consumers to do; a partition that
        # moved meanwhile is read again by its next owner from its last commit. Only a fatal
        # error ends the member. The test judges the end: every record read, every commit there.
        pending = {}

        def on_assign(consumer, partitions):
            assignments.append(sorted(p.partition for p in partitions))

        def on_revoke(consumer, partitions):
            for p in partitions:
                pending.pop(p.partition, None)

        def commit(message):
            try:
                consumer.commit(message=message, asynchronous=False)
                pending.pop(message.partition(), None)
            except KafkaException as e:
                error = e.args[0]
                if error.fatal():
                    raise
                commit_errors.append(error.name())
                pending[message.partition()] = message

        consumer = Consumer(
            confluent_config(
                bootstrap,
                password,
                **{
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                },
            )
        )
        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        while len(records) < expect and time.time() < deadline:
            message = consumer.poll(0.5)
            for retried in list(pending.values()):
                commit(retried)
            if message is None:
                continue
            if message.error():
                records.append({"error": str(message.error())})
                continue
            records.append(
                {
                    "partition": message.partition(),
                    "offset": message.offset(),
                    "key": message.key().decode() if message.key() else None,
                    "value": message.value().decode("utf-8", "replace"),
                    "headers": {k: (v.decode("latin-1") if v is not None else None) for k, v in (message.headers() or [])},
                }
            )
            commit(message)
        consumer.close()
    else:
        from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

        consumer = KafkaConsumer(
            topic,
            **kafka_python_config(bootstrap, password),
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        while len(records) < expect and time.time() < deadline:
            polled = consumer.poll(timeout_ms=500)
            for tp, messages in polled.items():
                for message in messages:
                    records.append(
                        {
                            "partition": message.partition,
                            "offset": message.offset,
                            "key": message.key.decode() if message.key else None,
                            "value": message.value.decode("utf-8", "replace"),
                            "headers": {k: (v.decode("latin-1") if v is not None else None) for k, v in message.headers},
                        }
                    )
                consumer.commit()
        assignments.append(sorted(tp.partition for tp in consumer.assignment()))
        consumer.close()
    return {"records": records, "assignments": assignments, "commit_errors": commit_errors}


def oauth_produce(bootstrap, token_url, header, ca, topic):
    import ssl
    import urllib.request

    from confluent_kafka import Producer

    def token(_config):
        # What a managed identity asks for Event Hubs: the resource https://eventhubs.azure.net.
        request = urllib.request.Request(
            f"{token_url}?resource=https://eventhubs.azure.net&api-version=2019-08-01",
            headers={"X-IDENTITY-HEADER": header},
        )
        with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=ca)) as response:
            answer = json.load(response)
        return answer["access_token"], float(answer["expires_on"])

    errors, placed = [], []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": token,
            "message.timeout.ms": 10000,
            "error_cb": lambda error: errors.append(str(error)),
        }
    )
    producer.poll(1)
    for i in range(5):
        producer.produce(
            topic,
            value=f"oauth-{i}".encode(),
            on_delivery=lambda error, message: errors.append(str(error))
            if error
            else placed.append({"partition": message.partition(), "offset": message.offset()}),
        )
    producer.flush(15)
    return {"placed": placed, "errors": errors}


def refused(bootstrap, password, topic, case):
    from confluent_kafka import KafkaException, Producer

    size = 1_100_000 if case == "too-large" else 10
    errors = []
    config = confluent_config(bootstrap, password)
    if case == "plaintext":
        # A client that does not know the endpoint wants SASL.
        config = {"bootstrap.servers": bootstrap}
    producer = Producer(
        dict(
            config,
            **{
                "message.max.bytes": 2_000_000,
                "message.timeout.ms": 10000,
                "allow.auto.create.topics": False,
                # Authentication failures reach the client through its error callback.
                "error_cb": lambda error: errors.append(str(error)),
            },
        )
    )

    def delivered(error, message):
        errors.append(str(error) if error else None)

    try:
        producer.produce(topic, value=b"x" * size, on_delivery=delivered)
        producer.flush(15)
    except KafkaException as e:
        errors.append(str(e))
    # Authentication and metadata errors come through the error callback or the metadata call.
    try:
        metadata = producer.list_topics(topic, timeout=5)
        t = metadata.topics.get(topic)
        if t is not None and t.error is not None:
            errors.append(str(t.error))
    except KafkaException as e:
        errors.append(str(e))
    return {"errors": errors}


def eh_receive(cs, hub, expect, seconds):
    import threading

    from azure.eventhub import EventHubConsumerClient

    received = []
    done = threading.Event()
    client = EventHubConsumerClient.from_connection_string(cs, consumer_group="$Default", eventhub_name=hub)

    def text(v):
        return v.decode("latin-1") if isinstance(v, bytes) else v

    def on_batch(context, events):
        for event in events:
            key = (event.system_properties or {}).get(b"x-opt-kafka-key")
            received.append(
                {
                    "partition": int(context.partition_id),
                    "sequence": event.sequence_number,
                    "kafka_key": text(key),
                    "properties": {text(k): text(v) for k, v in (event.properties or {}).items()},
                    "body": event.body_as_str(),
                }
            )
        if len(received) >= expect:
            done.set()

    worker = threading.Thread(
        target=lambda: client.receive_batch(on_event_batch=on_batch, max_batch_size=300, max_wait_time=0.5, starting_position="-1"),
        daemon=True,
    )
    worker.start()
    done.wait(seconds)
    client.close()
    worker.join(10)
    return received


def main():
    op, bootstrap, password, *args = sys.argv[1:]
    if op == "produce":
        out = produce(args[0], bootstrap, password, args[1], int(args[2]), args[3], args[4])
    elif op == "produce-readings":
        out = produce_readings(bootstrap, password, args[0], int(args[1]))
    elif op == "consume":
        out = consume(args[0], bootstrap, password, args[1], args[2], int(args[3]), float(args[4]))
    elif op == "eh-receive":
        out = eh_receive(password, args[0], int(args[1]), float(args[2]))
    elif op == "oauth-produce":
        # The connection string's place holds the token endpoint.
        out = oauth_produce(bootstrap, password, args[0], args[1], args[2])
    elif op == "refused":
        out = refused(bootstrap, password, args[0], args[1])
    else:
        raise SystemExit(f"unknown operation {op}")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
