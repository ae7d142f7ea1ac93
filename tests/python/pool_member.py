"""The official Python SDK as a member of a hubhost pool.

Usage: pool_member.py <event hub connection string> <hub> <storage connection string> <record file> <seconds>

An EventHubConsumerClient with BlobCheckpointStore (the container the Functions host uses),
on consumer group $Default, balancing with the SDK's own load balancer (1.5 s cycles, 6 s
expiry: the timings hubhost uses). Each batch is recorded in the pool tests' format
({"instance","partition","seqs"}) before it is checkpointed, then the client stops after
<seconds> and lets its partitions go.
"""

import json
import sys
import threading

from azure.eventhub import EventHubConsumerClient
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore


def main(conn, hub, storage, record, seconds):
    store = BlobCheckpointStore.from_connection_string(storage, "azure-webjobs-eventhub")
    client = EventHubConsumerClient.from_connection_string(
        conn,
        consumer_group="$Default",
        eventhub_name=hub,
        checkpoint_store=store,
        load_balancing_interval=1.5,
        partition_ownership_expiration_interval=6,
    )
    out = open(record, "a", buffering=1)

    def on_batch(context, events):
        if not events:
            return
        seqs = [e.sequence_number for e in events]
        out.write(json.dumps({"instance": "python", "partition": context.partition_id, "seqs": seqs}) + "\n")
        context.update_checkpoint(events[-1])

    threading.Timer(float(seconds), client.close).start()
    with client:
        client.receive_batch(on_event_batch=on_batch, max_batch_size=50, max_wait_time=1, starting_position="-1")


if __name__ == "__main__":
    main(*sys.argv[1:6])
