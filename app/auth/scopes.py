"""Engram's own scope names; an identity provider's may differ (ENGRAM_SCOPE_*), the verifier maps
them. A module of their own, importing nothing, so that the CLI can name them without loading the
MCP SDK."""

READ, WRITE, ADMIN = "memory:read", "memory:write", "memory:admin"
