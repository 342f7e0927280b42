"""Fair sharing between tenants: call rates, concurrent calls, and quotas on what a tenant stores.

A tenant's rate holds across replicas: its token bucket is in the database, and each replica takes
a few calls' worth of tokens at a time (`SharedBuckets`; docs/scaling.md, "Rate limits"). While
the database does not answer, each replica counts on its own. Concurrent calls are counted in
this process (each replica's database pool is what that cap protects). Quotas are exact: every
write adds its growth to the tenant's totals in its own transaction and fails if that passes a quota.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

from cachetools import TTLCache

from app.auth.principal import Principal
from app.config import Settings
from app.errors import EngramError
from app.observability import metrics
from app.observability.context import deadline
from app.store import limits as store
from app.store.database import Database, Growth, InvalidTenant, Tenant
from app.store.errors import DATABASE_ERRORS
from app.store.limits import UsageTotals

logger = logging.getLogger(__name__)

_DB_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, *DATABASE_ERRORS)
_ADMIT_ERRORS: tuple[type[BaseException], ...] = (InvalidTenant, *_DB_ERRORS)
# How long admitting a call may spend reading its tenant and limits (cached; a miss is one short query).
ADMIT_SECONDS = 2.0


class Buckets:
    """Token buckets by key, the least recently used dropped past `size` keys.

    A bucket holds up to `burst` tokens and gains `rate` per second; each call takes one. ~1 µs.
    """

    def __init__(self, size: int = 100_000) -> None:
        self._size = size
        self._state: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: str, rate: float, burst: int) -> float:
        """0 when a token was taken; otherwise the seconds until one will be there."""
        if rate <= 0:
            return 0.0
        now = time.monotonic()
        tokens, at = self._state.pop(key, (float(burst), now))
        tokens = min(float(burst), tokens + (now - at) * rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / rate
        self._state[key] = (tokens, now)
        if len(self._state) > self._size:
            self._state.popitem(last=False)
        return wait

    def waiting(self, key: str, rate: float, burst: int) -> float:
        """The seconds until `key` has a token again (0 if it has one now), taking none."""
        state = self._state.get(key)
        if rate <= 0 or state is None:
            return 0.0
        tokens = min(float(burst), state[0] + (time.monotonic() - state[1]) * rate)
        return 0.0 if tokens >= 1 else (1 - tokens) / rate


class SharedBuckets:
    """Each tenant's token bucket kept in the database, so that its rate holds whichever replicas
    serve it. A replica takes `lease_seconds` of the rate at a time (at least one call's worth, at
    most a quarter of the burst) and
    spends it locally until it is used up or that time has passed: at a high rate most calls do
    not ask the database, at a low one each does (one short statement). Tokens never come from
    anywhere but the shared bucket, so replicas together never exceed it; a lease one replica
    holds and does not use is lost to the others for at most `lease_seconds`.
    """

    def __init__(self, db: Database, *, lease_seconds: float, size: int = 100_000) -> None:
        self.db = db
        self.lease_seconds = lease_seconds
        # tenant id -> (tokens left, monotonic time the lease ends); entries go soon after they end
        self._leases: TTLCache[str, tuple[int, float]] = TTLCache(maxsize=size, ttl=lease_seconds)
        # One lease asked for at a time per tenant: calls arriving meanwhile share it, not take more.
        self._asking: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def _spend(self, tenant_id: str) -> bool:
        left, ends = self._leases.get(tenant_id, (0, 0.0))
        if left > 0 and ends > time.monotonic():
            self._leases[tenant_id] = (left - 1, ends)
            return True
        return False

    async def take(self, tenant_id: str, rate: float, burst: int) -> float:
        """0 when a call may run; otherwise the seconds until the tenant has a token again."""
        if self._spend(tenant_id):
            return 0.0
        asking = self._asking.get(tenant_id)
        if asking is None:
            asking = self._asking[tenant_id] = asyncio.Lock()
        async with asking:
            if self._spend(tenant_id):  # another call's lease came meanwhile
                return 0.0
            # at most a quarter of the burst: a replica never takes what the others need right now
            want = max(1, min(burst // 4, int(rate * self.lease_seconds)))
            granted, wait = await store.take_tokens(self.db, tenant_id, want, rate, burst)
            if granted == 0:
                return wait
            self._leases[tenant_id] = (granted - 1, time.monotonic() + self.lease_seconds)
            return 0.0


@dataclass(frozen=True, slots=True)
class Policy:
    """One tenant's limits: the server's defaults with its overrides. 0 switches a rate or quota off."""

    rate: float
    burst: int
    max_concurrent: int
    max_entities: int
    max_observations: int
    max_text_bytes: int
    deleted_retention_days: float  # soft-deleted entities are erased for good after this long


def refuse(reason: str, message: str, retry_after: float | None = None, **details: object) -> EngramError:
    """A `limit` error, counted by reason (a bounded label)."""
    metrics.LIMIT_REFUSALS.labels(reason).inc()
    if retry_after is not None:
        details["retry_after"] = round(max(retry_after, 0.001), 3)
    return EngramError("limit", message, reason=reason, **details)


class Fairness:
    def __init__(
        self,
        db: Database,
        defaults: Policy,
        *,
        cache_seconds: float,
        queue_seconds: float,
        shared: SharedBuckets | None = None,
    ) -> None:
        self.db = db
        self._shared = shared  # None: rates counted in this process only
        self.defaults = defaults
        self._cache_seconds = cache_seconds
        self._queue_seconds = queue_seconds
        self._policies: dict[str, tuple[float, Policy]] = {}  # tenant id -> (expires, policy)
        self._buckets = Buckets()
        self._slots: dict[str, tuple[int, asyncio.Semaphore]] = {}  # tenant key -> (size, slots)

    async def policy(self, tenant: Tenant) -> Policy:
        """The tenant's limits, read again after ENGRAM_LIMITS_CACHE_SECONDS; the defaults while the
        database does not answer (so server_status still can)."""
        cached = self._policies.get(tenant.id)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        if self.db.unreachable:  # known down: do not wait for it again
            return cached[1] if cached is not None else self.defaults
        try:
            async with self.db.transaction(tenant, readonly=True) as tx:
                row = await store.overrides(tx)
        except _DB_ERRORS as exc:
            logger.warning("tenant limits not readable (%s); using the defaults", type(exc).__name__)
            return cached[1] if cached is not None else self.defaults
        policy = self.defaults
        if row is not None:
            policy = replace(policy, **{k: v for k in store.COLUMNS if (v := getattr(row, k)) is not None})
        self._policies[tenant.id] = (now + self._cache_seconds, policy)
        return policy

    @asynccontextmanager
    async def admit(self, who: Principal, *, read: bool = True) -> AsyncIterator[None]:
        """Run a tool call within the tenant's rate and concurrent-call limit, or refuse it (`limit`).

        The tenant's limits are read within ADMIT_SECONDS; with `read=False`, or while the database
        is known to be down, the last limits read (or the defaults) apply without asking it.
        """
        tenant = None
        try:
            if read and not self.db.unreachable:
                with deadline(ADMIT_SECONDS):
                    tenant = await self.db.tenant(who.tenant)
                    policy = await self.policy(tenant)
            else:
                policy = self._known(who.tenant)
        except _ADMIT_ERRORS:
            policy = self.defaults  # the call itself reports what is wrong
        wait = await self._rate(who.tenant, tenant, policy)
        if wait:
            raise refuse(
                "tenant_rate", f"this tenant is over its rate of {policy.rate:g} calls per second", retry_after=wait
            )
        slots = self._slots_of(who.tenant, policy.max_concurrent)
        try:
            if slots.locked():  # all taken: wait a little for one (waiting calls hold no connection)
                async with asyncio.timeout(self._queue_seconds):
                    await slots.acquire()
            else:
                await slots.acquire()
        except TimeoutError:
            raise refuse(
                "tenant_concurrency",
                f"this tenant already runs {policy.max_concurrent} calls at once; retry shortly",
                retry_after=1.0,
            ) from None
        try:
            yield
        finally:
            slots.release()

    async def _rate(self, key: str, tenant: Tenant | None, policy: Policy) -> float:
        """The tenant's shared bucket when it is known and the database answers; else this process's."""
        if self._shared is not None and tenant is not None and policy.rate > 0 and not self.db.unreachable:
            try:
                with deadline(ADMIT_SECONDS):
                    return await self._shared.take(tenant.id, policy.rate, policy.burst)
            except _DB_ERRORS as exc:
                logger.warning("shared rate bucket not reachable (%s); counting here", type(exc).__name__)
        return self._buckets.take(key, policy.rate, policy.burst)

    def _known(self, key: str) -> Policy:
        """The limits last read for a tenant whose id this server already knows, or the defaults."""
        tenant = self.db.cached_tenant(key)
        cached = self._policies.get(tenant.id) if tenant is not None else None
        return cached[1] if cached is not None else self.defaults

    def _slots_of(self, key: str, size: int) -> asyncio.Semaphore:
        current = self._slots.get(key)
        if current is None or current[0] != size:  # a changed limit: calls holding the old slots finish there
            current = self._slots[key] = (size, asyncio.Semaphore(size))
        return current[1]

    @staticmethod
    def check_quotas(policy: Policy, totals: UsageTotals, growth: Growth) -> None:
        """Refuse a write that grew the tenant past a quota (a write that frees space always passes)."""
        for field, quota, reason in (
            ("entities", policy.max_entities, "quota_entities"),
            ("observations", policy.max_observations, "quota_observations"),
            ("text_bytes", policy.max_text_bytes, "quota_text_bytes"),
        ):
            total = getattr(totals, field)
            if quota and getattr(growth, field) > 0 and total > quota:
                raise refuse(
                    reason,
                    f"this write would take the tenant to {total} {field.replace('_', ' ')}, over its quota "
                    f"of {quota}; remove some first or ask an administrator for more",
                    quota=quota,
                    used=total - getattr(growth, field),
                )


def fairness_from_settings(db: Database, settings: Settings) -> Fairness:
    defaults = Policy(
        rate=settings.tenant_rate,
        burst=settings.tenant_burst,
        max_concurrent=settings.tenant_max_concurrent,
        max_entities=settings.quota_entities,
        max_observations=settings.quota_observations,
        max_text_bytes=settings.quota_text_bytes,
        deleted_retention_days=settings.deleted_retention_days,
    )
    shared = None
    if settings.tenant_rate_shared:
        shared = SharedBuckets(db, lease_seconds=settings.tenant_rate_lease_seconds)
    return Fairness(
        db,
        defaults,
        cache_seconds=settings.limits_cache_seconds,
        queue_seconds=settings.tenant_queue_seconds,
        shared=shared,
    )
