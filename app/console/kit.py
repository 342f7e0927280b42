"""What every page handler uses of the console: rendering a page, reading a posted form, answering
a change, and running a service call as the person; and the signed-in request it is for (`Visit`).
A page receives these and the services it uses, nothing more."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from app.auth.principal import Principal
from app.console.calls import Runner
from app.console.sessions import Session
from app.errors import EngramError
from app.scopes import ADMIN, WRITE


@dataclass(frozen=True, slots=True)
class Visit:
    """A signed-in request: the session, the principal its verified token makes, and the grant
    (the token's `sid`) this session is."""

    session: Session
    who: Principal
    grant: str = ""

    @property
    def can_write(self) -> bool:
        return WRITE in self.who.scopes

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.who.scopes

    @property
    def role(self) -> str:
        return "admin" if self.is_admin else "writer" if self.can_write else "reader"

    def require(self, scope: str) -> None:
        """The scope check a tool makes: a reader's post is refused whatever the page showed."""
        if scope not in self.who.scopes:
            raise EngramError("forbidden", f"your role ({self.role}) does not allow this")


class Kit(Protocol):
    run: Runner

    def page(
        self, request: Request, template: str, context: Mapping[str, Any], visit: Visit | None, status: int = 200
    ) -> Response: ...

    async def form(self, request: Request, visit: Visit) -> dict[str, str]: ...

    def done(self, visit: Visit, target: str, message: str) -> Response: ...

    def check_csrf(self, visit: Visit, fields: Mapping[str, str]) -> None: ...
