"""The development database tooling, not used by the server: the local PostgreSQL behind
`engram db up` (provision), more local clusters and a standby beside it for the tests' and
benchmarks' cells (localcells), and a local PgBouncer in front of it (pooler)."""
