"""The official Python SDK as a member of a hubhost pool.

Usage: pool_member.py <event hub connection string> <hub> <storage connection string> <record file>
                      <seconds> <name> [<load balancing interval s> <ownership expiry s>]

An EventHubConsumerClient with BlobCheckpointStore (the container the Functions host uses),
on consumer group $Default, balancing with the SDK's own greedy load balancer — at the SDK's
default timings unless an interval and an expiry are given (azure-eventhub 5.15: 30 s and
6 x 30 s = 180 s). Each batch is recorded in the pool tests' format
({"instance","partition","seqs"}) before it is checkpointed; the client stops after <seconds>
and lets its partitions go (or dies earlier by kill -9).

The processor's owner id in the ownership blobs is <name>, so the test can tell the peers
apart: the SDK draws a random UUID and offers no option for it, so this script replaces the
`uuid4` its event processor module calls. Nothing else of the SDK is touched.
"""

import json
import sys
import threading
import types

import azure.eventhub._eventprocessor.event_processor as event_processor
from azure.eventhub import EventHubConsumerClient
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore


def main(conn, hub, storage, record, seconds, name, interval=None, expiry=None):
    event_processor.uuid = types.SimpleNamespace(uuid4=lambda: name)
    store = BlobCheckpointStore.from_connection_string(storage, "azure-webjobs-eventhub")
    timings = {}
    if interval is not None:
        timings = {
            "load_balancing_interval": float(interval),
            "partition_ownership_expiration_interval": float(expiry),
        }
    client = EventHubConsumerClient.from_connection_string(
        conn,
        consumer_group="$Default",
        eventhub_name=hub,
        checkpoint_store=store,
        **timings,
    )
    out = open(record, "a", buffering=1)

    def on_batch(context, events):
        if not events:
            return
        seqs = [e.sequence_number for e in events]
        out.write(json.dumps({"instance": name, "partition": context.partition_id, "seqs": seqs}) + "\n")
        context.update_checkpoint(events[-1])

    threading.Timer(float(seconds), client.close).start()
    with client:
        client.receive_batch(on_event_batch=on_batch, max_batch_size=50, max_wait_time=1, starting_position="-1")


if __name__ == "__main__":
    main(*sys.argv[1:9])
