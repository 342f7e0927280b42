"""Tracing: a real server sends its spans over OTLP/HTTP to a collector on loopback, which decodes
them with the OpenTelemetry protocol's own messages. A tool call makes one trace: the SDK's span
for `tools/call`, the store's spans for each query under it, and the call's log line carries the
trace id."""

from __future__ import annotations

import asyncio
import time
import uuid
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.auth.devkeys import mint_token
from tests.support.client import connect, ok
from tests.support.local_http import ThreadedServer
from tests.support.server import free_port, server_env, start_server


class Collector:
    """An OTLP/HTTP trace receiver: every span it is sent, as (name, trace id, span id, parent id, attributes)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.port = free_port()
        self._server = ThreadedServer(
            Starlette(routes=[Route("/v1/traces", self._receive, methods=["POST"])]), self.port
        )

    async def _receive(self, request: Request) -> Response:
        self.requests += 1
        export = ExportTraceServiceRequest.FromString(await request.body())
        for resource in export.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "attributes": {a.key: a.value.string_value for a in span.attributes},
                            "service": service,
                        }
                    )
        return Response(b"", media_type="application/x-protobuf")

    def __enter__(self) -> Collector:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


async def _until(check: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the spans did not arrive"
        await asyncio.sleep(0.1)


async def test_a_tool_call_is_one_trace_from_the_sdk_span_to_the_store_queries(db_settings, tmp_path: Path) -> None:
    tenant = f"traced-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "server.log"
    with Collector() as collector, log.open("wb") as out:
        port = free_port()
        env = server_env(
            db_settings,
            port,
            ENGRAM_EMBEDDING_PROVIDER="none",
            ENGRAM_LOG_LEVEL="INFO",
            ENGRAM_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.port}",
            OTEL_BSP_SCHEDULE_DELAY="100",  # send batches every 0.1 s
            OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=test",  # the SDK's own detection reads it
        )
        process = start_server(env, stdout=out)
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            token = mint_token(db_settings.model_copy(update={"port": port}), tenant=tenant)
            async with connect(url, token) as c:
                ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]}))
                ok(await c.call_tool("get_entity", {"name": "Ada"}))

            def call_span() -> dict[str, Any] | None:
                return next((s for s in collector.spans if s["name"] == "tools/call get_entity"), None)

            await _until(lambda: (span := call_span()) is not None and _children(collector, span))
        finally:
            process.terminate()
            process.wait(timeout=30)

    call = call_span()
    assert call is not None and call["service"]["service.name"] == "engram"  # no OTEL_SERVICE_NAME: the default
    assert call["service"]["deployment.environment.name"] == "test"
    queries = _children(collector, call)
    # Named as the query-duration metric's operations: store module and function (relations.detail, ...).
    assert queries and all(find_spec(f"app.store.{q['name'].split('.')[0]}") for q in queries), queries
    assert all(q["attributes"]["db.system.name"] == "postgresql" for q in queries)
    # The call's log line names its trace.
    lines = [orjson.loads(line) for line in log.read_bytes().splitlines() if line.startswith(b"{")]
    logged = [line for line in lines if line.get("tool") == "get_entity" and "trace_id" in line]
    assert logged and logged[0]["trace_id"] == call["trace"]


def _children(collector: Collector, parent: dict[str, Any]) -> list[dict[str, Any]]:
    """The spans of `parent`'s trace below it, at any depth."""
    below, ids = [], {parent["id"]}
    for _ in range(5):
        for span in collector.spans:
            if span["trace"] == parent["trace"] and span["parent"] in ids and span["id"] not in ids:
                below.append(span)
                ids.add(span["id"])
    return below
