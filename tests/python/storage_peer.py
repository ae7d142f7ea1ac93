"""Reads what queue and table outputs wrote, and writes the blobs blob inputs read, with the
official Azure Storage SDKs for Python (azure-storage-queue, azure-data-tables,
azure-storage-blob), as an independent peer of hubhost's own clients.

  storage_peer.py queue <connection string> <queue>   -> {"messages": [<decoded text>, ...]}
  storage_peer.py table <connection string> <table>   -> {"entities": [{...}, ...]}
  storage_peer.py blob-put <connection string> <container> <name> <text>
                                                      -> {"written": "<container>/<name>"}

Queue messages are peeked (left on the queue) and decoded from base64, as the Storage Queues
extension's readers decode them; table entities are listed with their properties as the SDK
types them (an Edm.Int64 as {"int64": "…"}, an Edm.DateTime as its ISO text).
"""

import json
import sys

from azure.data.tables import TableServiceClient
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import BinaryBase64DecodePolicy, QueueClient


def queue(connection, name):
    client = QueueClient.from_connection_string(
        connection, name, message_decode_policy=BinaryBase64DecodePolicy()
    )
    messages = []
    # peek_messages gives at most 32 at a time; receive and leave them invisible instead.
    for message in client.receive_messages(messages_per_page=32, visibility_timeout=60):
        messages.append(message.content.decode("utf-8"))
    return {"messages": messages}


def typed(value):
    if hasattr(value, "edm_type"):
        return {str(value.edm_type.value).lower().replace("edm.", ""): str(value.value)}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def table(connection, name):
    client = TableServiceClient.from_connection_string(connection).get_table_client(name)
    entities = []
    for entity in client.list_entities():
        row = {key: typed(value) for key, value in entity.items()}
        entities.append(row)
    return {"entities": entities}


def blob_put(connection, container, name, text):
    service = BlobServiceClient.from_connection_string(connection)
    client = service.get_container_client(container)
    if not client.exists():
        client.create_container()
    client.upload_blob(name, text.encode("utf-8"), overwrite=True)
    return {"written": f"{container}/{name}"}


if __name__ == "__main__":
    what, connection = sys.argv[1:3]
    if what == "blob-put":
        print(json.dumps(blob_put(connection, *sys.argv[3:6])))
    else:
        print(json.dumps({"queue": queue, "table": table}[what](connection, sys.argv[3])))
