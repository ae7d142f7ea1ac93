# One azure-eventhub producer sending `count` copies of `body` in batches of `batch_size`,
# round-robin over the partitions; prints {"events", "bytes", "seconds"} (connect excluded).
import json
import sys
import time

from azure.eventhub import EventData, EventHubProducerClient

cs, hub, count, batch_size, partitions, body = sys.argv[1:7]
count, batch_size, partitions = int(count), int(batch_size), int(partitions)

with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
    producer.get_eventhub_properties()  # connects, so the clock measures sending only
    started = time.perf_counter()
    sent = 0
    partition = 0
    while sent < count:
        n = min(batch_size, count - sent)
        batch = producer.create_batch(partition_id=str(partition))
        for _ in range(n):
            event = EventData(body)
            event.properties = {"source": "hubhost-bench"}
            batch.add(event)
        producer.send_batch(batch)
        sent += n
        partition = (partition + 1) % partitions
    seconds = time.perf_counter() - started

print(json.dumps({"events": sent, "bytes": sent * len(body.encode()), "seconds": seconds}))
