"""A custom handler for the pool tests: records every invocation, then answers 200.

Started by `hubhost emulate` exactly as the Functions host starts a custom handler
(FUNCTIONS_CUSTOMHANDLER_PORT). Each invocation appends one JSON line to RECORD_FILE —
instance, function, partition, event hub, the batch's sequence numbers, its retry context and
this process's pid — before it answers, so the file is the handler's own account of what it
processed. A test that kills the instance with kill -9 reads what was recorded up to then.

For the tests of how the handler is started and stopped: arguments, if any, must be the port
alone (as host.json's `%FUNCTIONS_CUSTOMHANDLER_PORT%` gives it); PID_FILE gets this process's
pid at start; START_DELAY seconds pass before it listens; and the first invocation of
SLOW_FUNCTION (by any process: a file SLOW_MARK marks it) takes SLOW_SECONDS.

For the tests of output bindings: OUTPUT_PER_EVENT names outputs (comma-separated; `$return`
for the return value), each answered with one item per event of the batch,
{"id": "<partition>-<sequence number>", "partition": …, "seq": …} (with OUTPUT_ROW_KEY, also
"RowKey": the id, for table outputs).

For the tests of retry policies: FAIL_FUNCTION names a function whose every invocation (of
any trigger) is recorded, then answered 500.
"""

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(os.environ["FUNCTIONS_CUSTOMHANDLER_PORT"])
assert sys.argv[1:] in ([], [str(PORT)]), f"arguments {sys.argv[1:]!r}, port {PORT}"
RECORD = open(os.environ["RECORD_FILE"], "a", buffering=1)
INSTANCE = os.environ.get("RECORD_INSTANCE", "?")
LOCK = threading.Lock()
if "PID_FILE" in os.environ:
    with open(os.environ["PID_FILE"], "a") as f:
        f.write(f"{os.getpid()}\n")
time.sleep(float(os.environ.get("START_DELAY", "0")))


def as_json(value):
    # The host sends arrays as JSON text inside a string (docs/host-contract.md §2.1).
    return json.loads(value) if isinstance(value, str) else value


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, payload):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.answer(200, {})

    def body(self):
        # The host sends its request chunked (no Content-Length), as .NET sends an
        # ObjectContent; http.server leaves the framing to the handler.
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_POST(self):
        request = json.loads(self.body())
        metadata = request["Metadata"]
        function = self.path.strip("/")
        mark = os.environ.get("SLOW_MARK", "slowed")
        if function == os.environ.get("SLOW_FUNCTION") and not os.path.exists(mark):
            open(mark, "w").close()
            time.sleep(float(os.environ["SLOW_SECONDS"]))
        if "PartitionContext" not in metadata:
            return self.http_function(request)
        context = as_json(metadata["PartitionContext"])
        if "SequenceNumberArray" in metadata:
            seqs = as_json(metadata["SequenceNumberArray"])
        else:
            # Cardinality one: the event's own sequence number.
            seqs = [as_json(metadata["SequenceNumber"])]
        line = json.dumps(
            {
                "instance": INSTANCE,
                "function": function,
                "partition": context["PartitionId"],
                "hub": context["EventHubName"],
                "seqs": seqs,
                "key": as_json(metadata.get("PartitionKey")),
                "retry": as_json(metadata.get("RetryContext")),
                "pid": os.getpid(),
                # Input bindings' values, as the host sent them beside the trigger's.
                "inputs": {k: v for k, v in request["Data"].items() if k != "events"},
            }
        )
        with LOCK:
            RECORD.write(line + "\n")
        if function == os.environ.get("FAIL_FUNCTION"):
            return self.answer(500, {"error": "failing as FAIL_FUNCTION says"})
        outputs, returned = {}, None
        for name in filter(None, os.environ.get("OUTPUT_PER_EVENT", "").split(",")):
            items = [
                {"id": f"{context['PartitionId']}-{seq}", "partition": context["PartitionId"], "seq": seq}
                for seq in seqs
            ]
            if os.environ.get("OUTPUT_ROW_KEY"):
                # A table entity's row key: its id.
                for item in items:
                    item["RowKey"] = item["id"]
            if name == "$return":
                returned = items
            else:
                outputs[name] = items
        self.answer(200, {"Outputs": outputs, "Logs": [], "ReturnValue": returned})

    def http_function(self, request):
        # An HTTP function: what the host sent, echoed in the `res` output's body.
        function = self.path.strip("/")
        # The trigger's value is the one object; inputs are strings (docs/host-contract.md §1.3).
        (req,) = [v for v in request["Data"].values() if isinstance(v, dict)]
        inputs = [(k, v) for k, v in request["Data"].items() if not isinstance(v, dict)]
        if "Method" not in req:
            # A timer function: its TimerInfo and retry context recorded, nothing answered.
            with LOCK:
                RECORD.write(json.dumps({"function": function, "timer": req, "pid": os.getpid(),
                                         "inputs": dict(inputs),
                                         "retry": request["Metadata"].get("RetryContext")}) + "\n")
            if function == os.environ.get("FAIL_FUNCTION"):
                return self.answer(500, {"error": "failing as FAIL_FUNCTION says"})
            return self.answer(200, {"Outputs": {}, "Logs": [], "ReturnValue": None})
        with LOCK:
            RECORD.write(json.dumps({"function": function, "http": req}) + "\n")
        body = {"method": req["Method"], "query": req["Query"], "url": req["Url"],
                "body": req.get("Body"), "metadataQuery": request["Metadata"].get("Query")}
        res = {"statusCode": "201", "headers": {"X-Function": function}, "body": body}
        self.answer(200, {"Outputs": {"res": res}, "Logs": [], "ReturnValue": None})

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
