"""The seam between a client's hooks and the hooks service: what one client's adapter gives the
hook endpoint (app/hooks/routes.py), as a value, so that a client is one module and one `Client`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from app.services.hook_models import HookCall

E = TypeVar("E", bound=BaseModel)


@dataclass(frozen=True)
class Client(Generic[E]):
    """One client's hooks.

    `path`: where they post (`/hooks/<client>`); `model`: the input each event posts, validated as
    it comes (a refusal is `400 invalid: field: rule`); `events`: the event names the server answers
    (a tenant's `events` setting chooses among them); `name`: an event's name in metrics and logs
    (`hooks:<name>`); `call`: what the event asks of the hooks service; `answer`: the JSON the
    client reads, given the context to add (an answer with nothing to add is `{}`)."""

    path: str
    model: type[E]
    events: tuple[str, ...]
    name: Callable[[E], str]
    call: Callable[[E], HookCall]
    answer: Callable[[E, str], bytes]
