"""Reads what queue and table outputs wrote, with the official Azure Storage SDKs for Python
(azure-storage-queue, azure-data-tables), as an independent peer of hubhost's own clients.

  storage_peer.py queue <connection string> <queue>   -> {"messages": [<decoded text>, ...]}
  storage_peer.py table <connection string> <table>   -> {"entities": [{...}, ...]}

Queue messages are peeked (left on the queue) and decoded from base64, as the Storage Queues
extension's readers decode them; table entities are listed with their properties as the SDK
types them (an Edm.Int64 as {"int64": "…"}, an Edm.DateTime as its ISO text).
"""

import json
import sys

from azure.data.tables import TableServiceClient
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


if __name__ == "__main__":
    what, connection, name = sys.argv[1:4]
    print(json.dumps({"queue": queue, "table": table}[what](connection, name)))
