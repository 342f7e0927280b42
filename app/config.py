"""The one settings object. Every field is read from an ``ENGRAM_``-prefixed environment variable."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.scopes import ADMIN, READ, WRITE
from app.shipped import migrations_dir

_DEFAULT_MIGRATIONS = migrations_dir()  # sql/migrations in a checkout, app/sql/migrations in the wheel
# Each tool set is served at its own MCP endpoint (ENGRAM_TOOL_SETS picks which), with its own audience.
# The hook events /hooks/claude-code answers (docs/clients.md); the rest are answered empty.
HOOK_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop", "SubagentStop", "PreCompact", "SessionEnd")
ENDPOINT_PATHS = {"native": "/mcp", "memory": "/mcp/memory", "neo4j": "/mcp/neo4j", "chatgpt": "/mcp/chatgpt"}


def cache_dir() -> Path:
    """Where Engram keeps machine-local state: the dev database, the dev signing key."""
    if explicit := os.environ.get("ENGRAM_CACHE_DIR"):
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "engram"


def _comma_list(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


CommaList = Annotated[list[str], NoDecode]


class UpstreamProvider(BaseModel):
    """An OpenID Connect provider people may sign in with at the built-in authorization server."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,29}$", description="Used in URLs: /oauth/upstream/<name>.")
    label: str = Field(min_length=1, max_length=60, description='Shown as "Sign in with <label>".')
    issuer: str
    client_id: str = Field(min_length=1, max_length=500)
    client_secret: SecretStr
    scopes: str = "openid email profile"

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an http(s) issuer URL")
        return value.rstrip("/")


CELL_NAME = r"^[a-z][a-z0-9]{0,30}$"
MAIN_CELL = "main"
# What may follow ENGRAM_CELL_<NAME>_ in the environment: one connection URL each (docs/scaling.md, "Cells").
_CELL_URL_KINDS = ("url", "read_url", "admin_url", "replication_url", "listen_url")


class CellUrls(BaseModel):
    """How this replica reaches one cell: the run-time role (`url`, may be its PgBouncer), a hot
    standby for reads, the owner for migrations and moves, the address other cells replicate from,
    and a direct connection for LISTEN. Only `url` is needed to serve the cell's tenants."""

    model_config = {"frozen": True}

    url: SecretStr | None = None
    read_url: SecretStr | None = None
    admin_url: SecretStr | None = None
    replication_url: SecretStr | None = None
    listen_url: SecretStr | None = None

    def admin(self) -> str | None:
        url = self.admin_url or self.url
        return url.get_secret_value() if url else None

    def listen(self) -> str | None:
        url = self.listen_url or self.url
        return url.get_secret_value() if url else None

    def replication(self) -> str | None:
        url = self.replication_url or self.admin_url or self.url
        return url.get_secret_value() if url else None


def _cells_from_environment(data: object) -> object:
    """ENGRAM_CELL_<NAME>_URL and its siblings for each cell ENGRAM_CELLS names (and `main`'s
    READ_URL / REPLICATION_URL): variable names no field can declare, read here once."""
    if not isinstance(data, dict):
        return data
    names = _comma_list(data.get("cells", os.environ.get("ENGRAM_CELLS", "")))
    given = dict(data.get("cell_urls") or {})
    for name in [MAIN_CELL, *(names if isinstance(names, list) else [])]:
        if not isinstance(name, str) or name in given or not re.fullmatch(CELL_NAME, name):
            continue
        found = {
            kind: value
            for kind in _CELL_URL_KINDS
            if (value := os.environ.get(f"ENGRAM_CELL_{name.upper()}_{kind.upper()}"))
        }
        if found:
            given[name] = found
    return {**data, "cell_urls": given} if given else data


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore", frozen=True)

    # database
    database_url: SecretStr | None = Field(
        None, description="Run-time connection (the least-privilege role). Unset: the local `engram db`."
    )
    admin_database_url: SecretStr | None = Field(
        None, description="Owner connection used by `engram migrate`. Unset: ENGRAM_DATABASE_URL."
    )
    pool_min_size: int = Field(2, ge=0, le=100)
    pool_max_size: int = Field(10, ge=1, le=200)
    statement_timeout_ms: int = Field(10_000, ge=100, le=600_000)
    call_deadline_seconds: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="A tool call's database work ends by then, answered or not. Unset: the statement timeout + 3 s.",
    )
    pool_acquire_seconds: float = Field(5, gt=0, le=600, description="Longest wait for a pooled connection.")
    pool_statement_cache_size: int = Field(
        100, ge=0, le=10_000, description="Prepared statements kept per connection (docs/scaling.md)."
    )
    pool_max_queries: int = Field(10_000, ge=100, le=10_000_000, description="Queries before a connection is recycled.")
    pool_max_idle_seconds: float = Field(300, ge=0, le=86_400, description="Idle time before a connection is closed.")
    listen_database_url: SecretStr | None = Field(
        None, description="A direct (not transaction-pooled) connection for LISTEN. Unset: ENGRAM_DATABASE_URL."
    )
    migrations_dir: Path = _DEFAULT_MIGRATIONS

    # cells (docs/scaling.md, "Cells"): more databases holding tenants, beside the control database
    cells: CommaList = Field(
        default_factory=list, description="Cells besides `main`, each with ENGRAM_CELL_<NAME>_URL."
    )
    cell_urls: dict[str, CellUrls] = Field(
        default_factory=dict, description="From ENGRAM_CELL_<NAME>_URL, _READ_URL, ..."
    )
    standby_max_lag_seconds: float = Field(
        10, ge=0, le=3600, description="A standby further behind than this is not read from (0: standbys unused)."
    )
    read_your_writes_entries: int = Field(
        10_000, ge=100, le=10_000_000, description="Writers whose last commit position a server remembers."
    )

    # HTTP
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    public_url: str | None = Field(None, description="Base URL clients use; default http://HOST:PORT.")
    allowed_hosts: CommaList = Field(default_factory=list)
    allowed_origins: CommaList = Field(default_factory=list)
    max_request_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    shutdown_grace_seconds: int = Field(25, ge=0, le=600)
    http_max_concurrency: int = Field(
        200, ge=1, le=100_000, description="Connections and requests served at once; more get 503."
    )
    http_keepalive_seconds: int = Field(5, ge=1, le=600, description="Idle keep-alive connections close after this.")
    http_max_header_bytes: int = Field(16 * 1024, ge=1024, le=1024 * 1024, description="Request headers, in total.")
    database_wait_seconds: int = Field(60, ge=0, le=3600, description="How long start-up waits for the database.")

    # auth
    auth_mode: Literal["dev", "builtin", "oidc"] = "dev"
    dev_key_file: Path = Field(default_factory=lambda: cache_dir() / "dev-signing-key.json")
    token_ttl_seconds: int = Field(3600, ge=60, le=30 * 86400)
    oidc_issuer: str | None = Field(None, description="The identity provider's issuer URL (auth mode oidc).")
    oidc_audiences: CommaList = Field(
        default_factory=list, description="Accepted `aud` at every endpoint; default each endpoint's own URL."
    )
    oidc_jwks_url: str | None = Field(None, description="JWKS URL; default the one the issuer's metadata names.")
    oidc_client_id: str | None = Field(None, max_length=500, description="For token introspection (opaque tokens).")
    oidc_client_secret: SecretStr | None = None
    jwks_min_refresh_seconds: int = Field(30, ge=1, le=3600)
    api_key_cache_seconds: int = Field(30, ge=0, le=300, description="How long a revoked key may still work.")
    jwks_max_age_seconds: int = Field(3600, ge=60, le=86400)
    scope_claims: CommaList = Field(
        default_factory=lambda: ["scope", "scp"],
        description="Token claims that carry scopes (a space-separated string or a list), e.g. add `permissions`.",
    )
    scope_read: str = Field(READ, min_length=1, max_length=200)
    scope_write: str = Field(WRITE, min_length=1, max_length=200)
    scope_admin: str = Field(ADMIN, min_length=1, max_length=200)
    documentation_url: str | None = Field(None, description="Linked from the protected resource metadata.")
    tenant_claim: str = Field("tenant_id", min_length=1, max_length=100)
    tenant_fallback_claims: CommaList = Field(default_factory=lambda: ["org_id", "tid"])
    tenant_policy: Literal["auto", "managed"] = "auto"

    # the built-in authorization server (auth modes builtin and dev; docs/auth.md)
    access_token_ttl_seconds: int = Field(600, ge=60, le=86400, description="Lifetime of the access tokens it issues.")
    refresh_token_ttl_seconds: int = Field(30 * 86400, ge=3600, le=365 * 86400)
    signing_key_reload_seconds: int = Field(
        60, ge=1, le=3600, description="How often a replica reads the signing keys again (to follow a rotation)."
    )
    local_accounts: bool = Field(True, description="Sign-in with local accounts (`engram user add`).")
    upstream_providers: list[UpstreamProvider] = Field(
        default_factory=list, description="OpenID Connect providers to sign in with: a JSON list (docs/auth.md)."
    )
    client_registration: bool = Field(True, description="Dynamic client registration (RFC 7591) at /register.")
    client_metadata_documents: bool = Field(True, description="Clients identified by their metadata document URL.")
    client_metadata_allow_http_loopback: bool = Field(
        False, description="Accept metadata documents from http://127.0.0.1 (for tests only; never in production)."
    )
    unused_client_days: int = Field(1, ge=1, le=365, description="Registered clients never used are removed after.")
    sign_in_max_failures: int = Field(5, ge=1, le=1000, description="Wrong passwords per account per window.")
    sign_in_failure_window_seconds: int = Field(900, ge=60, le=86400)
    sign_in_per_minute: int = Field(30, ge=1, le=100_000, description="Sign-in attempts per client address.")
    token_per_minute: int = Field(60, ge=1, le=100_000, description="/token requests per client address.")
    register_per_minute: int = Field(10, ge=1, le=100_000, description="/register requests per client address.")
    authorize_per_minute: int = Field(60, ge=1, le=100_000, description="/authorize requests per client address.")

    # the console (docs/console.md)
    console: bool = Field(True, description="The web console at /console (auth modes builtin and dev).")

    # tools
    tool_sets: CommaList = Field(
        default_factory=lambda: list(ENDPOINT_PATHS),
        description="Endpoints served: native (/mcp), memory, neo4j and chatgpt (/mcp/memory, ...).",
    )
    neo4j_namespace: str = Field(
        "", max_length=40, pattern=r"^([A-Za-z0-9_]+-?)?$", description="Optional prefix of the neo4j tools' names."
    )
    disabled_tools: CommaList = Field(
        default_factory=list, description="Tools not served, as set/tool: native/query_graph,memory/delete_entities."
    )
    tool_output_schemas: bool = Field(
        False,
        description="List output schemas on the native endpoint too, and carry the complete record as structured "
        "content in every native result (the dialects always list theirs).",
    )

    # limits
    max_batch: int = Field(100, ge=1, le=1000, description="Items in one write call.")
    max_results: int = Field(200, ge=1, le=5000, description="Hard cap on any listing.")
    graph_page_size: int = Field(100, ge=1, le=5000, description="Entities per read_graph page.")
    observations_per_entity: int = Field(50, ge=1, le=1000, description="Observations listed per entity in slices.")
    max_batch_texts: int = Field(1000, ge=1, le=100_000, description="Observations in one write call, all items.")
    embed_sync_texts: int = Field(
        128, ge=0, le=10_000, description="Texts a write embeds before it commits; the rest wait for the filler."
    )
    embed_write_budget_ms: int = Field(
        50, ge=0, le=10_000, description="How long a write waits for its texts' vectors; the rest wait for the filler."
    )
    graph_page_relations: int = Field(1000, ge=1, le=50_000, description="Relations per read_graph page.")
    walk_level_edges: int = Field(5000, ge=10, le=1_000_000, description="Edges a walk reads per level.")
    walk_frontier: int = Field(1000, ge=1, le=100_000, description="Entities a walk expands per level.")
    subscriptions_per_principal: int = Field(8, ge=1, le=1000, description="Streams per user and client, per server.")
    subscriptions_per_process: int = Field(1000, ge=1, le=100_000, description="Open subscription streams per server.")
    subscription_idle_seconds: float = Field(
        900, ge=1, le=86_400, description="A subscription stream with no notification for this long is closed."
    )
    query_graph_max_rows: int = Field(200, ge=1, le=10_000, description="Rows one query_graph call returns.")
    query_graph_max_bytes: int = Field(
        1024 * 1024, ge=1024, le=64 * 1024 * 1024, description="JSON one query_graph call returns, about."
    )
    query_graph_max_value_bytes: int = Field(
        128 * 1024,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Largest value (string, list, map, collected list) one query_graph query may build.",
    )
    query_graph_max_sorted_rows: int = Field(
        10_000, ge=10, le=1_000_000, description="Rows the ORDER BY clauses of one query_graph query may sort."
    )
    query_graph_max_sort_key_bytes: int = Field(
        512, ge=64, le=65_536, description="Largest ORDER BY key (bytes) in a query_graph query."
    )
    query_graph_max_running: int = Field(
        4,
        ge=1,
        le=1000,
        description="query_graph calls one server process runs at once (each may hold its backend's bound).",
    )
    query_graph_tenant_running: int = Field(
        2, ge=1, le=1000, description="query_graph calls of one tenant one server process runs at once."
    )
    query_graph_timeout_ms: int = Field(
        2000, ge=10, le=600_000, description="How long one query_graph statement may run (within the call deadline)."
    )
    hierarchy_max_children: int = Field(
        100, ge=1, le=10_000, description="Areas, topics per area, subtopics per topic."
    )
    hierarchy_max_nodes: int = Field(1000, ge=1, le=100_000, description="(area, topic, subtopic) rows in one tree.")
    transfer_max_bytes: int = Field(
        10 * 1024 * 1024, ge=1024, le=1024**3, description="Largest file POST /admin/import takes; larger: the CLI."
    )
    transfer_deadline_seconds: float = Field(
        600, gt=0, le=86400, description="Database work of one /admin/export or /admin/import request."
    )

    # hooks: memory in an assistant's loop (docs/clients.md); a tenant may override six of them
    hooks: bool = Field(True, description="Serve /hooks/claude-code (recall on each prompt, turns kept as episodes).")
    hook_deadline_seconds: float = Field(
        0.8, gt=0, le=30, description="A hook answers by then; past it, an empty answer that blocks nothing."
    )
    hook_max_bytes: int = Field(
        256 * 1024, ge=1024, le=16 * 1024 * 1024, description="Largest hook input taken (larger: 413)."
    )
    hook_capture: bool = Field(True, description="Keep prompts and answers that hooks post as episodes.")
    hook_private: bool = Field(True, description="Keep captured turns in the poster's private memory (false: shared).")
    hook_events: CommaList = Field(
        default_factory=lambda: list(HOOK_EVENTS), description="Hook events answered; others get an empty answer."
    )
    hook_prompt_tokens: int = Field(500, ge=0, le=20_000, description="Most tokens injected for one prompt.")
    hook_start_tokens: int = Field(800, ge=0, le=20_000, description="Most tokens of the brief a session starts with.")
    hook_min_score: float = Field(
        0.2, ge=0, le=1, description="Fused recall score under which a fact is not injected (docs/benchmarks.md)."
    )
    hook_session_days: float = Field(
        30, gt=0, le=3650, description="A hook session idle this long forgets what it was shown."
    )

    # fair sharing (docs/security.md); 0 switches a rate or a quota off
    tenant_rate: float = Field(50, ge=0, le=1_000_000, description="Tool calls per second per tenant (refill).")
    tenant_rate_shared: bool = Field(True, description="Count a tenant's rate across replicas, in the database.")
    tenant_rate_lease_seconds: float = Field(
        0.1, gt=0, le=10, description="Each replica takes this many seconds' worth of a tenant's rate at a time."
    )
    tenant_burst: int = Field(200, ge=1, le=1_000_000, description="Tool calls a tenant may make at once.")
    tenant_max_concurrent: int = Field(4, ge=1, le=1000, description="Tool calls of one tenant running at once.")
    tenant_queue_seconds: float = Field(10, ge=0, le=600, description="Wait for a free slot before refusing.")
    token_rate: float = Field(50, ge=0, le=1_000_000, description="MCP requests per second per credential.")
    token_burst: int = Field(200, ge=1, le=1_000_000)
    auth_failure_rate: float = Field(
        1.0, ge=0, le=1_000_000, description="Refused credentials per second per client address, after the burst."
    )
    auth_failure_burst: int = Field(30, ge=1, le=1_000_000, description="Refused credentials an address may send.")
    verified_token_cache_seconds: int = Field(
        120, ge=0, le=3600, description="How long a verified token is trusted without checking it again."
    )
    quota_entities: int = Field(1_000_000, ge=0, description="Live entities per tenant.")
    quota_observations: int = Field(10_000_000, ge=0, description="Observations of live entities per tenant.")
    quota_text_bytes: int = Field(4 * 1024**3, ge=0, description="UTF-8 bytes of those observations per tenant.")
    deleted_retention_days: float = Field(
        30, ge=0, le=36_500, description="Days a soft-deleted entity is kept (restorable) before it is erased for good."
    )
    retention_sweep_seconds: float = Field(
        3600, ge=1, le=86_400, description="How often a server erases soft-deleted entities past their retention."
    )
    limits_cache_seconds: float = Field(30, ge=0, le=3600, description="How long a tenant's overrides are cached.")
    cursor_max_age_seconds: int = Field(
        86400, ge=1, le=30 * 86400, description="How long a pagination cursor stays valid after it was issued."
    )

    # embeddings and search (docs/search.md)
    embedding_provider: Literal["local", "sentence-transformers", "openai", "none"] = Field(
        "local", description="Who turns texts into vectors; `none` leaves search to words and names."
    )
    embedding_model: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="local: all-MiniLM-L6-v2 (the default, the only one); sentence-transformers: a name or path; "
        "openai: the model.",
    )
    embedding_dimensions: int | None = Field(None, ge=1, le=2000, description="Vector size; required for openai.")
    embedding_base_url: str = Field("https://api.openai.com/v1", description="An OpenAI-compatible API root.")
    embedding_api_key: SecretStr | None = None
    embedding_request_dimensions: bool = Field(
        False, description="Send `dimensions` with each request (models that can shorten their vectors)."
    )
    embedding_device: str | None = Field(
        None, max_length=50, description="sentence-transformers: torch device; unset picks one."
    )
    embedding_threads: int = Field(
        1, ge=1, le=64, description="local, sentence-transformers: CPU threads of the model."
    )
    embedding_batch_size: int = Field(64, ge=1, le=2048)
    embedding_timeout_seconds: float = Field(30, gt=0, le=600)
    embedding_max_retries: int = Field(3, ge=0, le=10)
    embedding_cache_size: int = Field(10_000, ge=0, le=1_000_000)
    embedding_workers: int = Field(1, ge=1, le=64, description="Embedding jobs run at once (the pool's size).")
    embedding_queue_texts: int = Field(
        4096, ge=0, le=1_000_000, description="Texts of writes that may wait for the pool; past it they stay pending."
    )
    search_ef_search: int = Field(200, ge=10, le=1000)
    rerank_model: str | None = Field(None, min_length=1, max_length=300, description="A cross-encoder; unset: none.")
    rerank_depth: int = Field(20, ge=1, le=200, description="Facts at the top of recall's ranking the reranker reads.")
    rerank_budget_ms: int = Field(1000, ge=1, le=60_000, description="Most a recall waits for it; then its own order.")

    # observability
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    metrics_port: int = Field(9464, ge=0, le=65535, description="/metrics on its own port; 0: on the main port.")
    metrics_tenants: CommaList = Field(default_factory=list, description="Tenants given their own metric label.")
    audit_retention_days: int = Field(365, ge=1, le=36500)
    usage_flush_seconds: float = Field(10, ge=0.1, le=3600)
    otlp_endpoint: str | None = Field(
        None, max_length=500, pattern=r"^https?://", description="OTLP/HTTP collector for traces; unset: no tracing."
    )
    trace_sample_ratio: float = Field(
        1.0, ge=0, le=1, description="Share of new traces kept (a sampled parent is followed)."
    )

    _normalise_lists = field_validator(
        "cells",
        "allowed_hosts",
        "allowed_origins",
        "tool_sets",
        "disabled_tools",
        "tenant_fallback_claims",
        "oidc_audiences",
        "metrics_tenants",
        "scope_claims",
        "hook_events",
        mode="before",
    )(_comma_list)

    @field_validator("hook_events")
    @classmethod
    def _check_hook_events(cls, value: list[str]) -> list[str]:
        unknown = set(value) - set(HOOK_EVENTS)
        if unknown:
            raise ValueError(f"a comma-separated list of: {', '.join(HOOK_EVENTS)}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _cell_urls(cls, data: object) -> object:
        return _cells_from_environment(data)

    @field_validator("cells")
    @classmethod
    def _check_cells(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(CELL_NAME, name) or name == MAIN_CELL:
                raise ValueError(f"{name[:40]!r}: a cell is named by 1-31 lowercase letters and digits, not `main`")
        if len(set(value)) != len(value) or len(value) > 100:
            raise ValueError("at most 100 cells, each named once")
        return value

    @field_validator("tool_sets")
    @classmethod
    def _check_tool_sets(cls, value: list[str]) -> list[str]:
        unknown = set(value) - set(ENDPOINT_PATHS)
        if unknown or not value:
            raise ValueError(f"a comma-separated list of: {', '.join(ENDPOINT_PATHS)}")
        return value

    @field_validator("disabled_tools")
    @classmethod
    def _check_disabled_tools(cls, value: list[str]) -> list[str]:
        for entry in value:
            tool_set, _, tool = entry.partition("/")
            if tool_set not in ENDPOINT_PATHS or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool):
                raise ValueError(f"{entry[:80]!r}: entries are SET/TOOL, SET one of {', '.join(ENDPOINT_PATHS)}")
        return value

    @property
    def console_served(self) -> bool:
        """Whether /console serves its pages (it needs the built-in authorization server)."""
        return self.console and self.auth_mode != "oidc"

    def disabled_in(self, tool_set: str) -> frozenset[str]:
        """The tools of `tool_set` that ENGRAM_DISABLED_TOOLS names (the neo4j ones without namespace)."""
        return frozenset(e.partition("/")[2] for e in self.disabled_tools if e.partition("/")[0] == tool_set)

    @field_validator("public_url", "oidc_issuer", "oidc_jwks_url", "documentation_url", "embedding_base_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError("must be an http(s) URL with a host and no query")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.pool_min_size > self.pool_max_size:
            raise ValueError("ENGRAM_POOL_MIN_SIZE must not exceed ENGRAM_POOL_MAX_SIZE")
        if self.auth_mode == "oidc" and not self.oidc_issuer:
            raise ValueError("ENGRAM_AUTH_MODE=oidc needs ENGRAM_OIDC_ISSUER")
        if bool(self.oidc_client_id) != bool(self.oidc_client_secret):
            raise ValueError("ENGRAM_OIDC_CLIENT_ID and ENGRAM_OIDC_CLIENT_SECRET go together")
        if self.embedding_provider == "openai" and (self.embedding_model is None or self.embedding_dimensions is None):
            raise ValueError("ENGRAM_EMBEDDING_PROVIDER=openai needs ENGRAM_EMBEDDING_MODEL and _DIMENSIONS")
        if self.call_deadline_seconds is not None and self.call_deadline_seconds * 1000 <= self.statement_timeout_ms:
            raise ValueError(
                "ENGRAM_CALL_DEADLINE_SECONDS must exceed ENGRAM_STATEMENT_TIMEOUT_MS (the server's own timeout "
                "should end slow statements first; the deadline is for a database that does not answer)"
            )
        if self.metrics_port and self.metrics_port == self.port:
            raise ValueError("ENGRAM_METRICS_PORT must differ from ENGRAM_PORT (or be 0 to share it)")
        return self

    @property
    def call_deadline(self) -> float:
        """Seconds a tool call's database work may take before its connection is dropped."""
        if self.call_deadline_seconds is not None:
            return self.call_deadline_seconds
        return self.statement_timeout_ms / 1000 + 3

    def check_serving(self) -> None:
        """What must hold to serve requests (other commands, like migrate, do not serve)."""
        if self.auth_mode == "dev" and not is_loopback_host(self.host):
            raise ValueError("ENGRAM_AUTH_MODE=dev is allowed only when ENGRAM_HOST is a loopback address")

    @property
    def base_url(self) -> str:
        return self.public_url or f"http://{self.host}:{self.port}"

    @property
    def resource_url(self) -> str:
        """The native endpoint's URL (/mcp), served or not: where `engram token` and the admin routes point."""
        return self.endpoint_url("native")

    def endpoint_url(self, tool_set: str) -> str:
        """The URL of a tool set's MCP endpoint: the resource (RFC 8707) its tokens must name in `aud`."""
        return f"{self.base_url}{ENDPOINT_PATHS[tool_set]}"

    @property
    def endpoint_urls(self) -> dict[str, str]:
        """The served endpoints' URLs, by tool set, in the order of ENDPOINT_PATHS."""
        return {name: self.endpoint_url(name) for name in ENDPOINT_PATHS if name in self.tool_sets}

    @property
    def issuer(self) -> str:
        """Who issues access tokens: the identity provider, or (builtin and dev modes) the server itself."""
        return self.oidc_issuer if self.auth_mode == "oidc" and self.oidc_issuer else self.base_url

    def audiences_for(self, tool_set: str) -> list[str]:
        """What `aud` a token needs at one endpoint: ENGRAM_OIDC_AUDIENCES (one audience for the whole
        server, as identity providers register one API), else the endpoint's own URL."""
        return self.oidc_audiences or [self.endpoint_url(tool_set)]

    @property
    def audiences(self) -> list[str]:
        """Every audience some served endpoint accepts (the admin routes accept any of them)."""
        return self.oidc_audiences or list(self.endpoint_urls.values())

    @property
    def scope_names(self) -> dict[str, str]:
        """Scope names as the identity provider spells them, by Engram's own name."""
        return {READ: self.scope_read, WRITE: self.scope_write, ADMIN: self.scope_admin}

    def runtime_dsn(self) -> str:
        if self.database_url is None:
            raise ValueError("ENGRAM_DATABASE_URL is not set (run `engram db up` for a local database)")
        return self.database_url.get_secret_value()

    def listen_dsn(self) -> str:
        return self.listen_database_url.get_secret_value() if self.listen_database_url else self.runtime_dsn()

    def admin_dsn(self) -> str:
        return (self.admin_database_url or self.database_url or SecretStr(self.runtime_dsn())).get_secret_value()

    def every_cell(self) -> dict[str, CellUrls | None]:
        """Every cell by name, `main` (the control database) first: how this replica reaches it,
        None for one it has no run-time URL for. The one place that lists the cells."""
        return {name: self.cell(name) for name in [MAIN_CELL, *self.cells]}

    def cell(self, name: str) -> CellUrls | None:
        """How to reach cell `name`: `main` is the control database; None for a cell this replica
        has no run-time URL for (its tenants are `unavailable`, reason `cell_unconfigured`)."""
        urls = self.cell_urls.get(name)
        if name == MAIN_CELL:
            return CellUrls(
                url=SecretStr(self.runtime_dsn()),
                admin_url=SecretStr(self.admin_dsn()),
                listen_url=SecretStr(self.listen_dsn()),
                read_url=urls.read_url if urls else None,
                replication_url=urls.replication_url if urls else None,
            )
        if name not in self.cells or urls is None or urls.url is None:
            return None
        return urls

    def transport_hosts(self) -> tuple[list[str], list[str]]:
        """Host and Origin values the MCP endpoint accepts (DNS-rebinding protection)."""
        hosts = list(self.allowed_hosts)
        origins = list(self.allowed_origins)
        public = urlsplit(self.base_url)
        hosts.append(public.netloc)
        origins.append(f"{public.scheme}://{public.netloc}")
        if is_loopback_host(self.host):
            hosts += [f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"[::1]:{self.port}"]
            origins += [f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}"]
        return sorted(set(hosts)), sorted(set(origins))

    def redacted(self) -> dict[str, object]:
        """The configuration as it can be logged: secrets masked."""
        return {k: ("***" if isinstance(v, SecretStr) else v) for k, v in self.model_dump().items() if v is not None}


def is_loopback_host(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1: a host only this machine reaches."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
