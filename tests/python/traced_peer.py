"""The official Python `azure-eventhub` package with tracing on, as Azure users turn it on:
`azure-core-tracing-opentelemetry` as azure-core's tracing implementation and the OpenTelemetry
SDK exporting over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT, under OTEL_SERVICE_NAME.

Usage: traced_peer.py <connection string> <hub> <operation> [args...]; prints JSON on stdout.

  send <body>...                      sends the bodies in one batch, inside a span "send readings";
                                      prints {"trace_id", "diagnostic_ids"} (each event's stamp)
  receive <group> <expect> <seconds>  receives from every partition from the start (each event
                                      processed inside the SDK's own span); prints each event's
                                      body and properties
"""

import json
import sys
import threading
import time

from azure.core.settings import settings
from azure.core.tracing.ext.opentelemetry_span import OpenTelemetrySpan
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

settings.tracing_implementation = OpenTelemetrySpan
provider = TracerProvider()
# Each span is exported as it ends: nothing is left behind when the process exits.
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)

from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient  # noqa: E402


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def properties_of(event):
    return {text(k): text(v) for k, v in (event.properties or {}).items()}


def send(cs, hub, bodies):
    tracer = trace.get_tracer("traced_peer")
    with tracer.start_as_current_span("send readings") as span:
        events = [EventData(body) for body in bodies]
        with EventHubProducerClient.from_connection_string(cs, eventhub_name=hub) as producer:
            batch = producer.create_batch()
            for event in events:
                batch.add(event)
            producer.send_batch(batch)
        trace_id = format(span.get_span_context().trace_id, "032x")
    return {
        "trace_id": trace_id,
        "diagnostic_ids": [properties_of(e).get("Diagnostic-Id") for e in events],
    }


def receive(cs, hub, group, expect, seconds):
    got = []
    done = threading.Event()
    client = EventHubConsumerClient.from_connection_string(
        cs, consumer_group=group, eventhub_name=hub
    )

    def on_event(partition_context, event):
        if event is None:
            return
        got.append({"body": event.body_as_str(), "properties": properties_of(event)})
        if len(got) >= expect:
            done.set()

    worker = threading.Thread(
        target=lambda: client.receive(on_event=on_event, starting_position="-1"), daemon=True
    )
    worker.start()
    done.wait(seconds)
    client.close()
    worker.join(10)
    return got


def main():
    cs, hub, op, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    if op == "send":
        result = send(cs, hub, args)
    elif op == "receive":
        result = receive(cs, hub, args[0], int(args[1]), float(args[2]))
    else:
        raise SystemExit(f"unknown operation {op}")
    provider.shutdown()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
