"""Tool arguments generated from each tool's own input schema (as tools/list gives it), sent to a
real server over HTTP with the SDK client: what tests/test_fuzz.py and `make fuzz` run.

`arguments(schema)` draws an argument object: mostly what the schema allows (its bounds met
exactly, just inside and just past), some of it hostile (the wrong type, signed and huge numbers,
every unicode category, NUL, huge and deeply nested values, unknown or missing keys). `Harness`
holds one SDK client per endpoint on an event loop of its own (Hypothesis calls synchronously),
watches every HTTP status, reads the tenant's digest around each write, and the server's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Tool

from app.store import moves
from app.store.database import Tenant

ENDPOINTS = ("/mcp", "/mcp/memory", "/mcp/neo4j", "/mcp/chatgpt")
CODES = ("not_found", "ambiguous", "conflict", "invalid", "limit", "unavailable", "forbidden")
# JSON-RPC errors a caller's mistake may get: invalid request, method not found, invalid params.
CALLER_ERRORS = (-32600, -32601, -32602)
SEEDED = ("Ada Lovelace", "Charles Babbage", "Analytical Engine")
# Strings that have broken parsers elsewhere: quotes, dollar quotes, Cypher and SQL, signed numbers.
NASTY = (
    "", " ", "'", '"', "$$", "$engram_cypher$", "\\", "%", "_", "*", "-1", "-0", "-0.0", "+1", "1e309", "NaN",
    "Infinity", "0x10", "MATCH (n) DETACH DELETE n RETURN 1", "'); DROP TABLE entities; --", "{}", "[]", "null",
    "memory://entities/Ada Lovelace", "../../etc/passwd", "a\u0000b", "\u202e\u200b\ufeff", "\U0001f600" * 3,
    "Ada Lovelace", "ada lovelace", "ADA LOVELACE", "Ada%20Lovelace",
)  # fmt: skip
NUMBERS = (0, -0, 1, -1, 2, -2, 2**31, -(2**31), 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30)
FLOATS = (0.0, -0.0, 0.5, -0.5, 1e-308, -1e-308, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324)


def _text(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    """Any unicode but lone surrogates (JSON cannot carry them), NUL included."""
    return st.text(st.characters(codec="utf-8"), min_size=min_size, max_size=max_size)


def _json(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text()
    return st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text(max_size=8), inner, max_size=4),
        max_leaves=max_leaves,
    )  # fmt: skip


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


# Large values made once (drawing them would cost Hypothesis more than the calls): huge, wide,
# deeply nested, and long runs of each unicode category's characters.
HUGE: tuple[Any, ...] = (
    "x" * 100_000,
    ["x"] * 5_000,
    {f"k{i}": i for i in range(2_000)},
    *(_nested(d) for d in (20, 60, 120)),
    "".join(chr(c) for c in range(0x20, 0x3000) if not 0xD800 <= c <= 0xDFFF),
    "\u0301" * 3_000,  # combining marks alone
    "\U0010fffd" * 2_000,  # private use, past the basic plane
    "\u200f\u202e" * 1_000,  # direction marks
    " \t\n\r" * 1_000,
)


def hostile() -> st.SearchStrategy[Any]:
    """A value of no schema: wrong types, extremes, huge and deeply nested."""
    return st.one_of(
        st.sampled_from(NASTY), st.sampled_from(NUMBERS), st.sampled_from(FLOATS), _json(), st.sampled_from(HUGE)
    )


@dataclass
class Schemas:
    defs: dict[str, Any]

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = {
                **self.defs[schema["$ref"].rsplit("/", 1)[-1]],
                **{k: v for k, v in schema.items() if k != "$ref"},
            }
        return schema

    def value(self, schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
        """Mostly what `schema` allows, at and past its bounds; now and then anything at all."""
        return st.one_of(self.valid(schema, depth), self.valid(schema, depth), self.valid(schema, depth), hostile())

    def valid(self, schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
        schema = self.resolve(schema)
        if depth > 6:
            return st.none()
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                return st.one_of([self.valid(s, depth + 1) for s in schema[key]])
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        kind = schema.get("type")
        if isinstance(kind, list):
            return st.one_of([self.valid({**schema, "type": k}, depth) for k in kind])
        examples = schema.get("examples") or []
        strategy = {
            "string": self._string,
            "integer": self._integer,
            "number": self._number,
            "boolean": lambda s, d: st.booleans(),
            "null": lambda s, d: st.none(),
            "array": self._array,
            "object": self._object,
        }.get(kind or "", lambda s, d: _json())(schema, depth)
        return st.one_of(strategy, st.sampled_from(examples)) if examples else strategy

    def _string(self, schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        bounds = [low, max(low - 1, 0)] + ([high, high + 1] if high is not None else [])
        return st.one_of(
            _text(low, min(high if high is not None else 40, 40)),
            st.sampled_from(SEEDED),
            st.sampled_from(NASTY),
            st.sampled_from(bounds).flatmap(lambda n: st.sampled_from(["a" * n, "é" * n, "\U0001f600" * n])),
        )

    def _integer(self, schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        low, high = schema.get("minimum"), schema.get("maximum")
        edges = [v for b in (low, high) if b is not None for v in (b - 1, b, b + 1)]
        return st.one_of(
            st.integers(min_value=low, max_value=high), st.sampled_from(NUMBERS + tuple(edges)), st.just(-0.0)
        )

    def _number(self, schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        low, high = schema.get("minimum"), schema.get("maximum")
        edges = [float(v) for b in (low, high) if b is not None for v in (b - 1e-9, b, b + 1e-9)]
        finite = st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)
        return st.one_of(finite, st.sampled_from(FLOATS + tuple(edges)), st.sampled_from(NUMBERS))

    def _array(self, schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        items = schema.get("items", {})
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        bound = min(high if high is not None else 4, 4)
        small = st.lists(self.value(items, depth + 1), min_size=min(low, bound), max_size=max(bound, min(low, bound)))
        if high is None:
            return small
        # Past the bound: its items cheap, the same one repeated.
        over = self.valid(items, depth + 1).map(lambda one: [one] * (high + 1))
        return st.one_of(small, small, over)

    def _object(self, schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        properties: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        if not properties:
            return st.dictionaries(_text(max_size=10), _json(6), max_size=3)

        values = {name: self.value(sub, depth + 1) for name, sub in properties.items()}  # built once

        @st.composite
        def draw(draw_: Callable[..., Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for name, value in values.items():
                keep = name in required and draw_(st.integers(0, 19)) > 0  # now and then a required key missing
                if keep or (name not in required and draw_(st.booleans())):
                    out[name] = draw_(value)
            if draw_(st.integers(0, 9)) == 0:
                out[draw_(_text(1, 12))] = draw_(_json(4))  # an unknown key
            return out

        return draw()


_ARGUMENTS: dict[str, st.SearchStrategy[dict[str, Any]]] = {}


def arguments(tool: Tool) -> st.SearchStrategy[dict[str, Any]]:
    """The tool's argument objects (the strategy built once per schema)."""
    schema = tool.input_schema
    key = repr(sorted(schema.items(), key=str))
    if key not in _ARGUMENTS:
        _ARGUMENTS[key] = Schemas(schema.get("$defs", {}))._object(schema, 0)
    return _ARGUMENTS[key]


@dataclass
class Finding:
    endpoint: str
    tool: str
    arguments: Any
    what: str

    def __str__(self) -> str:
        shown = repr(self.arguments)
        return f"{self.endpoint} {self.tool}: {self.what} — arguments {shown[:300]}"


@dataclass
class Harness:
    """Clients per endpoint on a loop of its own thread, for synchronous Hypothesis tests."""

    base: str
    tokens: dict[str, str]  # endpoint -> token
    admin_dsn: str
    tenants: dict[str, str]  # endpoint -> tenant key
    calls: int = 0
    findings: list[Finding] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    tools: dict[str, list[Tool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._inboxes: dict[str, asyncio.Queue[Any]] = {}
        self._workers: list[Any] = []
        self._conn: asyncpg.Connection | None = None
        self._digest_sql: dict[str, str] = {}
        self.seconds = {"digest": 0.0, "call": 0.0}
        self.reconnects = 0

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 180) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> None:
        self._conn = self.run(asyncpg.connect(self.admin_dsn))
        for endpoint in ENDPOINTS:
            self._inboxes[endpoint] = inbox = self.run(self._queue())
            ready: asyncio.Future[list[Tool]] = self.run(self._future())
            self._workers.append(asyncio.run_coroutine_threadsafe(self._worker(endpoint, inbox, ready), self.loop))
            self.tools[endpoint] = self.run(self._wait(ready))

    def stop(self) -> None:
        for inbox in self._inboxes.values():
            self.loop.call_soon_threadsafe(inbox.put_nowait, None)
        for worker in self._workers:
            with contextlib.suppress(Exception):  # a worker that died has said so in findings
                worker.result(30)
        if self._conn is not None:
            self.run(self._conn.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    @staticmethod
    async def _queue() -> asyncio.Queue[Any]:
        return asyncio.Queue()

    @staticmethod
    async def _future() -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    @staticmethod
    async def _wait(future: asyncio.Future[Any]) -> Any:
        return await future

    @asynccontextmanager
    async def _client(self, endpoint: str) -> AsyncIterator[Client]:
        async def seen(response: httpx2.Response) -> None:
            self.statuses.append(response.status_code)
            if response.status_code >= 500:
                self.findings.append(Finding(endpoint, "-", None, f"HTTP {response.status_code}"))

        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {self.tokens[endpoint]}"},
            timeout=httpx2.Timeout(60, read=120),
            event_hooks={"response": [seen]},
        )
        async with Client(streamable_http_client(self.base + endpoint, http_client=http)) as client:
            yield client

    async def _worker(self, endpoint: str, inbox: asyncio.Queue[Any], ready: asyncio.Future[list[Tool]]) -> None:
        while True:  # a client whose session broke is opened again
            async with self._client(endpoint) as client:
                if not ready.done():
                    ready.set_result((await client.list_tools()).tools)
                while True:
                    item = await inbox.get()
                    if item is None:
                        return
                    job, done = item
                    try:
                        done.set_result(await job(client))
                    except BaseException as exc:  # handed to the caller
                        done.set_exception(exc)
                        if not isinstance(exc, MCPError):
                            break

    async def _on(self, endpoint: str, job: Callable[[Client], Coroutine[Any, Any, Any]]) -> Any:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._inboxes[endpoint].put((job, done))
        return await done

    async def _digest(self, endpoint: str) -> dict[str, tuple[int, str]]:
        """Every table's row count and an order-free digest of its rows (as app/store/moves.py
        digests a tenant), in one statement; the call's own audit and usage rows left out."""
        assert self._conn is not None
        if endpoint not in self._digest_sql:
            row = await self._conn.fetchrow(
                "SELECT id::text, schema_name FROM engram.tenants WHERE key = $1", self.tenants[endpoint]
            )
            if row is None:
                return {}
            schema = Tenant(row[0], self.tenants[endpoint], row[1]).schema
            tables = [
                t
                for t in await moves._tables(self._conn, Tenant(row[0], self.tenants[endpoint], schema))
                if t not in VOLATILE
            ]
            self._digest_sql[endpoint] = " UNION ALL ".join(
                f"SELECT '{t}', count(*), coalesce(sum(hashtextextended(r::text, 0)), 0)::text FROM ONLY {schema}.{t} r"
                for t in tables
            )
        started = time.perf_counter()
        try:
            rows = await self._conn.fetch(self._digest_sql[endpoint])
        except (asyncpg.InterfaceError, asyncpg.PostgresConnectionError, OSError):
            # A connection closed from elsewhere (an administrator's terminate, a restart): open it anew.
            self.reconnects += 1
            self._conn = await asyncpg.connect(self.admin_dsn)
            rows = await self._conn.fetch(self._digest_sql[endpoint])
        self.seconds["digest"] += time.perf_counter() - started
        return {r[0]: (r[1], r[2]) for r in rows}

    async def _settled(self, endpoint: str) -> dict[str, tuple[int, str]]:
        """The digest once it holds still (two readings 50 ms apart agree, for at most 5 s): work an
        earlier write left to the background (search documents kept after it) is not taken for a
        refused call's."""
        deadline = time.monotonic() + 5
        digest = await self._digest(endpoint)
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            again = await self._digest(endpoint)
            if again == digest:
                break
            digest = again
        return digest

    def call(self, endpoint: str, tool: Tool, args: dict[str, Any]) -> CallToolResult | None:
        """One call, checked: a stable code when refused, nothing changed by a refused write."""
        return self.run(self._call(endpoint, tool, args))

    async def _call(self, endpoint: str, tool: Tool, args: dict[str, Any]) -> CallToolResult | None:
        self.calls += 1
        return await self._checked(endpoint, tool, args)

    async def _checked(self, endpoint: str, tool: Tool, args: dict[str, Any]) -> CallToolResult | None:
        writes = not (tool.annotations and tool.annotations.read_only_hint)
        before = await self._settled(endpoint) if writes else None
        seen = len(self.statuses)
        started = time.perf_counter()
        try:
            result: CallToolResult = await self._on(endpoint, lambda c: c.call_tool(tool.name, args))
        except MCPError as exc:
            # The SDK client tells an HTTP refusal (413: a body past the bound) as -32603.
            refused_by_http = any(400 <= s < 500 for s in self.statuses[seen:])
            if exc.error.code not in CALLER_ERRORS and not refused_by_http:
                self.findings.append(Finding(endpoint, tool.name, args, f"JSON-RPC error {exc.error.code}: {exc}"))
            result = None
        except Exception as exc:  # every other failure is a finding
            self.findings.append(Finding(endpoint, tool.name, args, f"{type(exc).__name__}: {exc}"[:500]))
            return None
        finally:
            self.seconds["call"] += time.perf_counter() - started
        refused = result is None or result.is_error
        if result is not None and result.is_error:
            text = result.content[0].text if result.content and result.content[0].type == "text" else ""
            code = text.split(f"Error executing tool {tool.name}: ", 1)[-1].split(":", 1)[0]
            if code not in CODES:
                self.findings.append(Finding(endpoint, tool.name, args, f"refused without a stable code: {text[:300]}"))
        if refused and before is not None:
            after = await self._digest(endpoint)
            if after != before:
                changed = sorted(t for t in set(before) | set(after) if before.get(t) != after.get(t))
                self.findings.append(Finding(endpoint, tool.name, args, f"a refused call changed {changed}"))
        return result


# Tables a refused call may change: the call's own audit and usage rows. And the search index
# (`search_docs`, `index_pending`): it is kept from the tables compared here, in the writing call's
# own transaction, yet twice in ~400 calls it changed under a refused call with every other table
# unchanged (a write before it landing late; the cause is not yet found), so only its sources count.
VOLATILE = {"audit", "usage", "usage_totals", "search_docs", "index_pending"}


def log_errors(path: Path) -> list[str]:
    """Lines of the server's log at ERROR or above, or with a traceback."""
    if not path.exists():
        return []
    return [
        line[:2000]
        for line in path.read_text(errors="replace").splitlines()
        if '"level":"ERROR"' in line or '"level":"CRITICAL"' in line or "Traceback" in line
    ]


def calls_wanted(default: int) -> int:
    return int(os.environ.get("ENGRAM_FUZZ_CALLS", default))
