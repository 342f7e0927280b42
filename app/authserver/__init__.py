"""The built-in OAuth 2.1 authorization server (auth modes `builtin` and `dev`).

Built on the SDK's authorization-server handlers; this package adds what they lack: storage in
PostgreSQL (so any replica answers any step), sign-in and consent pages, memberships, signing
keys, refresh-token families, client metadata documents and rate limits.
"""
