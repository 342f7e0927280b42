"""Prometheus metrics. Labels are bounded: routes, methods, tools and outcomes, never tenants,
users or entities (a tenant label exists only for tenants listed in ENGRAM_METRICS_TENANTS)."""

from __future__ import annotations

import functools
import platform
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

BUILD = Info("engram_build", "Engram version and runtime.", registry=REGISTRY)

HTTP_REQUESTS = Counter(
    "engram_http_requests_total",
    "HTTP requests by route and status class.",
    ["route", "method", "status"],
    registry=REGISTRY,
)
HTTP_LATENCY = Histogram(
    "engram_http_request_duration_seconds",
    "HTTP request latency by route.",
    ["route"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
HTTP_IN_FLIGHT = Gauge("engram_http_requests_in_flight", "HTTP requests being served.", registry=REGISTRY)

MCP_REQUESTS = Counter(
    "engram_mcp_requests_total",
    "MCP requests by JSON-RPC method and outcome (ok, error).",
    ["method", "outcome"],
    registry=REGISTRY,
)
TOOL_CALLS = Counter(
    "engram_tool_calls_total",
    "Tool calls by tool and outcome (ok, tool_error, invalid, unauthorized, internal).",
    ["tool", "outcome"],
    registry=REGISTRY,
)
TOOL_LATENCY = Histogram(
    "engram_tool_call_duration_seconds",
    "Tool call latency by tool and outcome.",
    ["tool", "outcome"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
TENANT_TOOL_CALLS = Counter(
    "engram_tenant_tool_calls_total",
    "Tool calls of the tenants listed in ENGRAM_METRICS_TENANTS.",
    ["tenant", "tool", "outcome"],
    registry=REGISTRY,
)

DB_LATENCY = Histogram(
    "engram_db_query_duration_seconds",
    "Database operation latency by store operation.",
    ["operation"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
DB_POOL = Gauge(
    "engram_db_pool_connections", "Pool connections by state (open, in_use, waiting).", ["state"], registry=REGISTRY
)
STANDBY_READS = Counter(
    "engram_db_standby_reads_total", "Read-only tool transactions served by a cell's standby.", registry=REGISTRY
)
DB_RETRIES = Counter(
    "engram_db_transaction_retries_total",
    "Tool calls retried after a deadlock or serialization failure.",
    registry=REGISTRY,
)

EMBED_CALLS = Counter(
    "engram_embedding_requests_total",
    "Embedding requests by provider and outcome.",
    ["provider", "outcome"],
    registry=REGISTRY,
)
EMBED_BATCH = Histogram(
    "engram_embedding_batch_size",
    "Texts per embedding request.",
    ["provider"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    registry=REGISTRY,
)
EMBED_LATENCY = Histogram(
    "engram_embedding_duration_seconds",
    "Embedding request latency by provider.",
    ["provider"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
EMBED_PENDING = Gauge("engram_embeddings_pending", "Texts waiting for an embedding.", registry=REGISTRY)

# The embedding pool (app/embeddings/queue.py): what waits for a worker, and for how long.
EMBED_QUEUE = Gauge(
    "engram_embedding_queue_texts",
    "Texts waiting for an embedding worker, by priority (query, write, fill).",
    ["priority"],
    registry=REGISTRY,
)
EMBED_WAIT = Histogram(
    "engram_embedding_queue_wait_seconds",
    "Time an embedding job waited for a worker, by priority (query, write, fill).",
    ["priority"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
EMBED_CACHED = Gauge(
    "engram_embedding_cache_vectors",
    "Vectors in the embedding cache (at most ENGRAM_EMBEDDING_CACHE_SIZE; about 1.8 KB each at 384 dimensions).",
    registry=REGISTRY,
)
EMBED_DEFERRED = Counter(
    "engram_embedding_deferred_texts_total",
    "Texts a write did not embed before its transaction (budget spent, pool full, provider down).",
    registry=REGISTRY,
)

LIMIT_REFUSALS = Counter(
    "engram_limit_refusals_total",
    "Calls and requests refused by a fair-sharing limit or a bound, by reason (docs/security.md).",
    ["reason"],
    registry=REGISTRY,
)
TRUNCATED = Counter(
    "engram_results_truncated_total",
    "Answers cut to a server bound, by what was cut (walk, path, read_graph, hierarchy).",
    ["what"],
    registry=REGISTRY,
)

AUTH_FAILURES = Counter("engram_auth_failures_total", "Refused credentials by reason.", ["reason"], registry=REGISTRY)
# Fetches of the documents authentication depends on that failed: the identity provider's JWKS and
# discovery metadata (mode oidc), clients' metadata documents (built-in authorization server).
AUTH_FETCH_FAILURES = Counter(
    "engram_auth_fetch_failures_total",
    "Failed fetches of authentication documents by kind (jwks, discovery, client_metadata) and reason.",
    ["kind", "reason"],
    registry=REGISTRY,
)
# Every pair exists from the start at 0, so that the first failure is an increase rate() sees.
for _kind, _reasons in {
    "jwks": ("unreachable", "timeout", "http_status", "invalid"),
    "discovery": ("unreachable", "timeout", "http_status", "invalid"),
    "client_metadata": ("unreachable", "timeout", "http_status", "invalid", "forbidden", "busy"),
}.items():
    for _reason in _reasons:
        AUTH_FETCH_FAILURES.labels(_kind, _reason)
SUBSCRIPTIONS = Gauge(
    "engram_subscriptions", "Open subscription streams (subscriptions/listen) in this process.", registry=REGISTRY
)
SUBSCRIPTION_NOTIFICATIONS = Counter(
    "engram_subscription_notifications_total", "Resource-updated notifications sent to subscribers.", registry=REGISTRY
)
SUBSCRIPTIONS_REFUSED = Counter(
    "engram_subscriptions_refused_total", "Subscriptions refused, by bound.", ["reason"], registry=REGISTRY
)
SUBSCRIPTIONS_IDLE_CLOSED = Counter(
    "engram_subscriptions_idle_closed_total", "Subscription streams closed after a quiet spell.", registry=REGISTRY
)
TENANTS = Gauge("engram_tenants", "Tenants in the database.", registry=REGISTRY)
DB_UP = Gauge("engram_database_up", "1 when the last database check succeeded.", registry=REGISTRY)


@functools.lru_cache(maxsize=4096)
def child(metric: Counter | Histogram, *values: str) -> Any:
    """`metric.labels(*values)`, looked up once per label set rather than on every request."""
    return metric.labels(*values)


def set_build_info(version: str, revision: str) -> None:
    BUILD.info({"version": version, "python": platform.python_version(), "revision": revision})


OAUTH_EVENTS = Counter(
    "engram_oauth_events_total",
    "Built-in authorization server: each flow's outcomes (register, authorize, sign_in, consent, token, refresh,"
    " revoke; ok or a bounded refusal reason).",
    ["flow", "outcome"],
    registry=REGISTRY,
)

# The embedding provider's circuit breaker (app/embeddings/embedder.py): one series per state, 1 for
# the current one. open: calls fail at once; half_open: the pause is over, the next call tries.
BREAKER_STATES = ("closed", "open", "half_open")
EMBED_BREAKER = Gauge(
    "engram_embedding_breaker_state",
    "The embedding provider's circuit breaker: 1 for its current state (closed, open, half_open).",
    ["state"],
    registry=REGISTRY,
)
EMBED_BREAKER_FAILURES = Gauge(
    "engram_embedding_breaker_failures",
    "Consecutive failed embedding requests (0 while the provider answers).",
    registry=REGISTRY,
)
LOOP_LAG = Gauge(
    "engram_event_loop_lag_seconds",
    "The longest delay of the event loop in the latest probe window: how late a timer fired.",
    registry=REGISTRY,
)
