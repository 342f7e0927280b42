"""Connected applications: the signed-in person's own grants, on every tenant they are a member
of, and disconnecting an application from a tenant.

Unlike the memory pages this is about the person, not the session's tenant: the authorization
server's `Connections` lists and revokes by the user id of the session's verified token (`sub`).
Forms name a client and a tenant, never a user, so a forged post reaches only its sender's grants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints
from starlette.requests import Request
from starlette.responses import Response

from app.authserver.clients import MAX_URL
from app.console.calls import parse
from app.services.models import Clean

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from app.authserver.connections import Connections
    from app.console.kit import Kit, Visit

PATH = "/console/apps"


class DisconnectForm(BaseModel):
    """The bounds of the form; who may disconnect what is the service's rule (its own grants only)."""

    model_config = ConfigDict(extra="ignore")

    client: Annotated[str, StringConstraints(min_length=1, max_length=MAX_URL), Clean]
    tenant: Annotated[str, StringConstraints(min_length=1, max_length=200), Clean]


class ConnectedApps:
    def __init__(
        self, kit: Kit, connections: Connections, signed_out: Callable[[Request], Awaitable[Response]]
    ) -> None:
        self.c = kit
        self.connections = connections
        self.signed_out = signed_out  # when the person disconnected the console itself

    async def listing(self, request: Request, visit: Visit) -> Response:
        listing = await self.connections.of(visit.who.subject)
        return self.c.page(request, "apps.html", {"listing": listing}, visit)

    async def disconnect(self, request: Request, visit: Visit) -> Response:
        """Revokes the person's grants of one application on one tenant; disconnecting the console
        from the session's own grant signs this browser out."""
        form = parse(DisconnectForm, await self.c.form(request, visit))
        done = await self.connections.disconnect(visit.who.subject, form.client, form.tenant)
        if visit.grant and visit.grant in done.grants:
            return await self.signed_out(request)
        what = f"{len(done.grants)} grant{'' if len(done.grants) == 1 else 's'} revoked"
        if done.consent_forgotten:
            what += ", remembered consent forgotten"
        return self.c.done(visit, PATH, f"Disconnected {done.name} from {done.tenant} ({what}).")
