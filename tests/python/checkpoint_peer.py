"""The official Python checkpoint store as an independent peer of hubhost's.

Each call does one operation of `azure-eventhub-checkpointstoreblob`'s BlobCheckpointStore
against the given container and prints the result as JSON, so a Rust test can compare what
Python sees with what hubhost sees.

usage: checkpoint_peer.py CONN CONTAINER NAMESPACE HUB CONSUMER_GROUP OP [ARGS...]
  OP list-ownership
  OP list-checkpoints
  OP claim OWNER PARTITION[:ETAG] ...      (no ETAG: claim a partition nobody owns yet)
  OP checkpoint PARTITION OFFSET SEQUENCE_NUMBER
"""

import json
import sys

from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore


def main(argv):
    conn, container, namespace, hub, group, op, *args = argv
    store = BlobCheckpointStore.from_connection_string(conn, container)
    scope = {
        "fully_qualified_namespace": namespace,
        "eventhub_name": hub,
        "consumer_group": group,
    }
    if op == "list-ownership":
        out = store.list_ownership(namespace, hub, group)
    elif op == "list-checkpoints":
        out = store.list_checkpoints(namespace, hub, group)
    elif op == "claim":
        owner, *parts = args
        claims = []
        for part in parts:
            pid, _, etag = part.partition(":")
            claim = dict(scope, partition_id=pid, owner_id=owner)
            if etag:
                claim["etag"] = etag
            claims.append(claim)
        out = store.claim_ownership(claims)
    elif op == "checkpoint":
        pid, offset, seq = args
        store.update_checkpoint(
            dict(scope, partition_id=pid, offset=offset, sequence_number=int(seq))
        )
        out = {"ok": True}
    else:
        raise SystemExit(f"unknown op {op}")
    json.dump(list(out) if isinstance(out, (list, tuple)) else out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
