"""Engram's own scope names; an identity provider's may differ (ENGRAM_SCOPE_*), the verifier maps
them. A module of their own, importing nothing, so that the CLI can name them without loading the
MCP SDK."""

from typing import Final, Literal

Scope = Literal["memory:read", "memory:write", "memory:admin"]
READ: Final = "memory:read"
WRITE: Final = "memory:write"
ADMIN: Final = "memory:admin"
