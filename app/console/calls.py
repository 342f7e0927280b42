"""One console action = one service call, run as a tool call is: as the signed-in person's
principal, admitted by the tenant's fair share, within the call deadline, again after a lost race,
and recorded (audit rows name the person and the action `console:<action>`)."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.auth.principal import Principal
from app.errors import EngramError
from app.observability.context import calling
from app.services.calls import retrying, within
from app.services.fairness import Fairness

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class Runner:
    def __init__(self, fairness: Fairness | None, deadline: float = math.inf) -> None:
        self._fairness = fairness
        self._deadline = deadline

    async def __call__(
        self, who: Principal, action: str, fn: Callable[..., Awaitable[T]], *args: Any, writes: bool, **kwargs: Any
    ) -> T:
        with calling(f"console:{action}", who.subject, who.client_id, who.tenant):
            admit = self._fairness.admit(who) if self._fairness else contextlib.nullcontext()
            async with admit:
                body = functools.partial(retrying, fn, who, *args, **kwargs)
                return await within(self._deadline, body, writes=writes)


def parse(model: type[M], data: dict[str, Any]) -> M:
    """A service input model from form fields, refused as the tools refuse (`invalid: field: rule`)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "form"
        raise EngramError("invalid", f"{where}: {first['msg']}") from None
