"""What every page handler uses of the console: rendering a page, reading a posted form, answering
a change, and running a service call as the person. A page receives this and the services it uses,
nothing more."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from app.console.calls import Runner

if TYPE_CHECKING:
    from app.console.console import Visit


class Kit(Protocol):
    run: Runner

    def page(
        self, request: Request, template: str, context: Mapping[str, Any], visit: Visit | None, status: int = 200
    ) -> Response: ...

    async def form(self, request: Request, visit: Visit) -> dict[str, str]: ...

    def done(self, visit: Visit, target: str, message: str) -> Response: ...

    def check_csrf(self, visit: Visit, fields: Mapping[str, str]) -> None: ...
