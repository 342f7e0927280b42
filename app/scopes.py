"""Engram's own scope names; an identity provider's may differ (ENGRAM_SCOPE_*), the verifier maps
them. On the ground floor of `app/` (it imports nothing of Engram's), so that the settings, the
CLI, the authorization server and the tools all name them without an arrow back up."""

from typing import Final, Literal

Scope = Literal["memory:read", "memory:write", "memory:admin"]
READ: Final = "memory:read"
WRITE: Final = "memory:write"
ADMIN: Final = "memory:admin"
