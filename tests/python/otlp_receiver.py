"""An OTLP receiver built on OpenTelemetry's own protobuf definitions (the `opentelemetry-proto`
package) and grpcio: what a collector or a tracing backend is to an exporter, with nothing else.

Usage: otlp_receiver.py
Listens on 127.0.0.1 for OTLP over HTTP/protobuf (POST /v1/traces, /v1/metrics, /v1/logs) and
over gRPC (TraceService and MetricsService), each on a port it picks itself, and prints:
  {"http": <port>, "grpc": <port>}          first, once both listen
  {"type": "span", ...}                     one line per span received
  {"type": "metric", ...}                   one line per metric data point received
A body that does not parse is answered 400 and printed as {"type": "error", ...}.
"""

import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

lock = threading.Lock()


def emit(record):
    with lock:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


def any_value(value):
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def attributes(pairs):
    return {pair.key: any_value(pair.value) for pair in pairs}


def spans(request, transport):
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                emit({
                    "type": "span",
                    "transport": transport,
                    "service": resource.get("service.name"),
                    "resource": resource,
                    "scope": scope_spans.scope.name,
                    "name": span.name,
                    "kind": span.kind,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "links": [
                        {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()}
                        for link in span.links
                    ],
                    "attributes": attributes(span.attributes),
                    "status": span.status.code,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                })


def metrics(request, transport):
    for resource_metrics in request.resource_metrics:
        resource = attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                for point in getattr(metric, kind).data_points:
                    if kind == "histogram":
                        value = point.count
                    else:
                        value = getattr(point, point.WhichOneof("value"))
                    emit({
                        "type": "metric",
                        "transport": transport,
                        "service": resource.get("service.name"),
                        "name": metric.name,
                        "kind": kind,
                        "unit": metric.unit,
                        "attributes": attributes(point.attributes),
                        "value": value,
                    })


class Http(BaseHTTPRequestHandler):
    ROUTES = {
        "/v1/traces": (trace_service_pb2.ExportTraceServiceRequest,
                       trace_service_pb2.ExportTraceServiceResponse, spans),
        "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest,
                        metrics_service_pb2.ExportMetricsServiceResponse, metrics),
        "/v1/logs": (logs_service_pb2.ExportLogsServiceRequest,
                     logs_service_pb2.ExportLogsServiceResponse, lambda request, transport: None),
    }

    def do_POST(self):
        route = self.ROUTES.get(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if route is None:
            self.answer(404, b"")
            return
        request_type, response_type, handle = route
        request = request_type()
        try:
            request.ParseFromString(body)
        except Exception as error:  # a body that is not the message: say so, keep serving
            emit({"type": "error", "path": self.path, "error": str(error)})
            self.answer(400, b"")
            return
        handle(request, "http/protobuf")
        self.answer(200, response_type().SerializeToString())

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        spans(request, "grpc")
        return trace_service_pb2.ExportTraceServiceResponse()


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        metrics(request, "grpc")
        return metrics_service_pb2.ExportMetricsServiceResponse()


def main():
    http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    emit({"http": http.server_address[1], "grpc": grpc_port})
    # Until the test closes stdin (or dies, which closes it too).
    sys.stdin.read()
    server.stop(0)
    http.shutdown()


if __name__ == "__main__":
    main()
