"""Live memory: who is subscribed to which tenant's changes in this process, with their bounds.

Changes come from every server through the database (app/store/changes.py `Feed`); each one is
passed to this process's subscriptions of the same tenant only, and to no other. A subscription is
opened for a principal (bounded per principal and per process) and closed by its stream."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

import orjson

from app.auth.principal import Principal
from app.config import Settings
from app.errors import EngramError
from app.observability import metrics
from app.services.calls import within
from app.store import subscriptions
from app.store.changes import Change, Feed
from app.store.database import Database


@dataclass(eq=False)
class Subscription:
    """One open stream: its tenant (by key), its principal and the resource URIs it asked for.
    `deliver` is set by the transport that serves the stream; `touched` after each delivery."""

    tenant: str
    principal: str
    uris: frozenset[str]
    deliver: Callable[[str], None] | None = None
    touched: Callable[[], None] | None = None
    id: int = 0
    closed: bool = field(default=False)
    session: str | None = None  # a 2025-11-25 session's stream: its URIs are kept in the database


GRAPH_URI = "memory://knowledge-graph"


def entity_uris(name: str) -> tuple[str, ...]:
    """The URIs an entity's resource may be subscribed under: the name as written, and encoded."""
    encoded = f"memory://entities/{quote(name, safe='')}"
    raw = f"memory://entities/{name}"
    return (raw,) if raw == encoded else (raw, encoded)


def principal_key(who: Principal) -> str:
    """Who holds a subscription: tenant, user and client (as JSON: any of them may hold any character)."""
    return orjson.dumps([who.tenant, who.subject, who.client_id]).decode()


class Live:
    def __init__(
        self, db: Database, dsns: Sequence[str], *, per_principal: int, per_process: int, idle_seconds: float
    ) -> None:
        """`dsns`: a direct connection to each cell's database (writes announce on their tenant's cell)."""
        self.db = db
        self.per_principal = per_principal
        self.per_process = per_process
        self.idle_seconds = idle_seconds
        self._feeds = [Feed(dsn, self.receive) for dsn in dsns]
        self._by_tenant: dict[str, dict[int, Subscription]] = {}
        self._principals: Counter[str] = Counter()
        self._ids = itertools.count(1)
        self._reloads: set[asyncio.Task[None]] = set()
        self.open_count = 0

    @classmethod
    def from_settings(cls, settings: Settings, db: Database) -> Live:
        return cls(
            db,
            # LISTEN needs a session of its own: not through a transaction pooler
            [listen for urls in settings.every_cell().values() if urls and (listen := urls.listen())],
            per_principal=settings.subscriptions_per_principal,
            per_process=settings.subscriptions_per_process,
            idle_seconds=settings.subscription_idle_seconds,
        )

    def start(self) -> None:
        for feed in self._feeds:
            feed.start()

    async def stop(self) -> None:
        for feed in self._feeds:
            await feed.stop()

    async def ready(self, seconds: float) -> bool:
        """Whether every cell's feed listens (within `seconds`)."""
        try:
            async with asyncio.timeout(seconds):
                for feed in self._feeds:
                    await feed.connected.wait()
        except TimeoutError:
            return False
        return True

    def open(self, who: Principal, uris: frozenset[str]) -> Subscription:
        """A subscription for `who`'s tenant, or `limit` past a bound."""
        key = principal_key(who)
        if self.open_count >= self.per_process:
            metrics.child(metrics.SUBSCRIPTIONS_REFUSED, "per_process").inc()
            raise EngramError("limit", f"this server holds its most subscriptions ({self.per_process}); retry later")
        if self._principals[key] >= self.per_principal:
            metrics.child(metrics.SUBSCRIPTIONS_REFUSED, "per_principal").inc()
            raise EngramError(
                "limit", f"at most {self.per_principal} open subscriptions per client and user; close one first"
            )
        sub = Subscription(who.tenant, key, uris, id=next(self._ids))
        self._by_tenant.setdefault(who.tenant, {})[sub.id] = sub
        self._principals[key] += 1
        self.open_count += 1
        metrics.SUBSCRIPTIONS.set(self.open_count)
        return sub

    def close(self, sub: Subscription) -> None:
        if sub.closed:
            return
        sub.closed = True
        subs = self._by_tenant.get(sub.tenant, {})
        subs.pop(sub.id, None)
        if not subs:
            self._by_tenant.pop(sub.tenant, None)
        self._principals[sub.principal] -= 1
        if self._principals[sub.principal] <= 0:
            del self._principals[sub.principal]
        self.open_count -= 1
        metrics.SUBSCRIPTIONS.set(self.open_count)

    def receive(self, change: Change) -> None:
        """A change from any server: to the subscriptions of its tenant (all, after a gap in the feed)."""
        if change.session is not None:
            for sub in list(self._by_tenant.get(change.tenant or "", {}).values()):
                if sub.session == change.session:
                    task = asyncio.get_running_loop().create_task(self._reload(sub))
                    self._reloads.add(task)
                    task.add_done_callback(self._reloads.discard)
            return
        if change.tenant is None:
            targets = [s for subs in self._by_tenant.values() for s in subs.values()]
        else:
            targets = list(self._by_tenant.get(change.tenant, {}).values())
        for sub in targets:
            uris = self._matching(sub, change)
            if not uris or sub.deliver is None:
                continue
            for uri in uris:
                sub.deliver(uri)
            metrics.SUBSCRIPTION_NOTIFICATIONS.inc(len(uris))
            if sub.touched is not None:
                sub.touched()

    # --- 2025-11-25 sessions: resources/subscribe, and the stream that carries their notifications --

    async def open_session(self, who: Principal, session: str) -> Subscription:
        """A session's stream, following what the session subscribed to (on any server)."""
        sub = self.open(who, frozenset())
        sub.session = session
        try:
            await self._reload(sub)
        except BaseException:
            self.close(sub)
            raise
        return sub

    async def _reload(self, sub: Subscription) -> None:
        uris = await within(
            self.db.control.call_deadline, lambda: self.db.run(subscriptions.followed, sub.session or "", sub.principal)
        )
        sub.uris = uris

    async def follow(self, who: Principal, session: str, uris: list[str], *, on: bool) -> None:
        tenant = await self.db.tenant(who.tenant)
        try:
            if on:
                await self.db.run(subscriptions.add, session, tenant.id, tenant.key, principal_key(who), uris)
            else:
                await self.db.run(subscriptions.remove, session, tenant.key, principal_key(who), uris)
        except subscriptions.TooMany:
            raise EngramError(
                "limit", f"a session follows at most {subscriptions.MAX_URIS} resources; unsubscribe from some"
            ) from None

    async def sweep(self) -> int:
        return await self.db.run(subscriptions.sweep)

    @staticmethod
    def _matching(sub: Subscription, change: Change) -> list[str]:
        if change.names is None:
            return sorted(sub.uris)
        uris = {GRAPH_URI}
        for name in change.names:
            uris.update(entity_uris(name))
        return sorted(uris & sub.uris)
