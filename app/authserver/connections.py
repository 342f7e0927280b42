"""A person's connected applications: which clients hold a live grant to their memory (or a
remembered consent), on which tenants, and disconnecting one of them.

Every operation takes the person's user id from the caller's verified token (the console passes
its session token's `sub`); nothing here reads a user from a form, so a person can only ever see
and end their own grants. Naming a client or tenant they hold nothing for is `not_found`, the same
answer whether it belongs to someone else or to no one.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.authserver.accounts import user_key
from app.authserver.clients import MAX_URL, Clients, EngramClient, public_view
from app.authserver.events import Events
from app.errors import EngramError
from app.ids import TENANT_KEY
from app.store import oauth
from app.store.database import Database

MAX_GRANTS = 200  # grants (and, apart, remembered consents) a listing shows
NAME_SECONDS = 2.0  # how long a listing waits for clients' metadata documents before showing their ids
NAME_LOOKUPS = 8  # clients looked up at once (database connections, document fetches)


@dataclass(frozen=True, slots=True)
class Connection:
    """What one application holds of one person on one tenant."""

    tenant: str
    scopes: list[str]  # those of its live grants, together
    grants: frozenset[str]  # the live grants' ids (the `sid` of their access tokens)
    granted_at: datetime | None  # its oldest live grant; None: only a remembered consent
    last_issued_at: datetime | None  # when it last got tokens (a sign-in or a refresh)
    remembered: list[str] | None  # the scopes of a remembered consent, if one is


@dataclass(frozen=True, slots=True)
class Application:
    client_id: str
    name: str  # the client's own name (registration or metadata document), else its id
    first_party: bool  # part of this server (the console)
    redirect_hosts: list[str]  # where its authorizations send the browser back, as registered
    connections: list[Connection]


@dataclass(frozen=True, slots=True)
class Listing:
    applications: list[Application]
    more: bool  # more grants or consents than a listing shows
    limit: int


@dataclass(frozen=True, slots=True)
class Disconnected:
    name: str
    tenant: str
    grants: frozenset[str]  # the grants revoked
    consent_forgotten: bool


class Connections:
    def __init__(self, db: Database, clients: Clients, events: Events, *, access_lifetime: timedelta) -> None:
        self._db = db
        self._clients = clients
        self._events = events
        self._access_lifetime = access_lifetime

    async def of(self, user_id: str, limit: int = MAX_GRANTS) -> Listing:
        """The person's live grants and remembered consents, by application, then tenant."""
        user = user_key(user_id)
        if user is None:
            return Listing([], False, limit)
        grants = await self._db.run(oauth.live_grants, user, self._access_lifetime, limit + 1)
        consents = await self._db.run(oauth.user_consents, user, limit + 1)
        more = len(grants) > limit or len(consents) > limit
        held: dict[tuple[str, str], list[oauth.LiveGrant]] = defaultdict(list)
        for grant in grants[:limit]:
            held[grant.client_id, grant.tenant].append(grant)
        remembered = {(c.client_id, c.tenant): c.scopes for c in consents[:limit]}
        keys = sorted(held.keys() | remembered.keys())
        clients = await self._known(client_id for client_id, _ in keys)
        by_client: dict[str, list[Connection]] = defaultdict(list)
        for client_id, tenant in keys:
            these = held.get((client_id, tenant), [])
            issued = [g.last_issued_at for g in these if g.last_issued_at is not None]
            by_client[client_id].append(
                Connection(
                    tenant=tenant,
                    scopes=sorted({s for g in these for s in g.scopes}),
                    grants=frozenset(g.id for g in these),
                    granted_at=min((g.created_at for g in these), default=None),
                    last_issued_at=max(issued, default=None),
                    remembered=remembered.get((client_id, tenant)),
                )
            )
        applications = [self._application(client_id, clients.get(client_id), c) for client_id, c in by_client.items()]
        applications.sort(key=lambda a: (not a.first_party, a.name.casefold(), a.client_id))
        return Listing(applications, more, limit)

    async def disconnect(self, user_id: str, client_id: str, tenant: str) -> Disconnected:
        """Revokes every grant of the person for `client_id` on `tenant` (their tokens are refused
        within seconds) and forgets the consent remembered for it; recorded as an event."""
        if not client_id or len(client_id) > MAX_URL or "\x00" in client_id:
            raise EngramError("invalid", f"client: 1 to {MAX_URL} characters, no NUL")
        if not TENANT_KEY.fullmatch(tenant):
            raise EngramError("invalid", "tenant: 1-200 letters, digits and . _ : @ | -")
        user = user_key(user_id)
        grants, forgotten = await self._db.run(oauth.disconnect, user, client_id, tenant) if user else ([], False)
        if not grants and not forgotten:
            await self._events("disconnect", "not_found", user_id=user, client_id=client_id[:200], tenant=tenant)
            raise EngramError("not_found", "you hold no grant or remembered consent of this application on this tenant")
        detail = f"{len(grants)} grant(s) revoked" + ("; remembered consent forgotten" if forgotten else "")
        await self._events("disconnect", "ok", user_id=user, client_id=client_id, tenant=tenant, detail=detail)
        client = (await self._known([client_id])).get(client_id)
        return Disconnected(_name(client_id, client), tenant, frozenset(grants), forgotten)

    async def _known(self, client_ids: Iterable[str]) -> dict[str, EngramClient]:
        """The clients found, in parallel; a metadata document that does not answer within
        NAME_SECONDS (or at all) leaves its client to be shown by its id."""
        slots = asyncio.Semaphore(NAME_LOOKUPS)

        async def get(client_id: str) -> EngramClient | None:
            async with slots:
                return await self._clients.get(client_id)

        tasks = {client_id: asyncio.ensure_future(get(client_id)) for client_id in set(client_ids)}
        if not tasks:
            return {}
        await asyncio.wait(tasks.values(), timeout=NAME_SECONDS)
        found: dict[str, EngramClient] = {}
        for client_id, task in tasks.items():
            if not task.done():
                task.cancel()
            elif task.exception() is None and (client := task.result()) is not None:
                found[client_id] = client
        return found

    def _application(self, client_id: str, client: EngramClient | None, connections: list[Connection]) -> Application:
        hosts = public_view(client)["redirect_hosts"] if client else []
        first_party = self._clients.is_first_party(client_id)
        return Application(client_id, _name(client_id, client), first_party, hosts, connections)


def _name(client_id: str, client: EngramClient | None) -> str:
    return (client.client_name if client else None) or client_id
