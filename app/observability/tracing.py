"""OpenTelemetry tracing, off unless ENGRAM_OTLP_ENDPOINT names a collector.

The `mcp` SDK already opens a span per MCP message (`tools/call get_entity`, with the client's
trace context from `_meta` as its parent); the store adds one span per query function (`timed`), so a
trace shows where a call spent its time. Spans go to the collector over OTLP/HTTP in batches, off
the request path. While tracing is off the store's spans are not even created: `enabled` is False
and the API's global tracer is the no-op one.

Span attributes carry names of operations, never arguments: no tenant content, tokens or SQL values.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio
from opentelemetry.trace import SpanKind

enabled = False
_tracer = trace.get_tracer("engram")


def start(endpoint: str, *, version: str, sample_ratio: float) -> TracerProvider:
    """Send spans to the OTLP/HTTP collector at `endpoint` (e.g. http://otel-collector:4318).

    A sampled parent (the client's, through `_meta`) is followed; a new trace is kept with
    probability `sample_ratio`. Headers, timeouts and TLS come from the standard OTEL_EXPORTER_OTLP_*
    variables, which the exporter reads itself. The resource is the SDK's own detection
    (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, the SDK's attributes) over Engram's defaults:
    service.name `engram` and the version unless those variables say otherwise.
    """
    global enabled, _tracer
    provider = TracerProvider(
        resource=resource(version),
        sampler=ParentBasedTraceIdRatio(sample_ratio),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces")))
    trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer("engram")
    enabled = True
    return provider


def resource(version: str) -> Resource:
    """Engram's defaults, then what the environment names: the OTEL detector's attributes merged
    last win (`Resource.create` alone would let the defaults override OTEL_SERVICE_NAME)."""
    defaults = Resource.create({"service.name": "engram", "service.version": version})
    return defaults.merge(OTELResourceDetector().detect())


@contextmanager
def db_span(operation: str) -> Iterator[None]:
    """A client span for one store function (`entities.resolve`) against PostgreSQL."""
    with _tracer.start_as_current_span(
        operation,
        kind=SpanKind.CLIENT,
        attributes={"db.system.name": "postgresql", "db.operation.name": operation},
    ):
        yield


def current_trace_id() -> str | None:
    """The trace id of the current span, for log lines; None outside any trace."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
