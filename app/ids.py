"""The spellings Engram accepts for what names a tenant and a record: a tenant's key and the
canonical id. On the ground floor of `app/` (it imports nothing of Engram's): the tokens' tenant
claim (app/auth/), the store, the console and the tools' schemas check with the same patterns."""

import re

# A tenant's key, as the tenants table's CHECK has it (fullmatch: "$" would let a final newline through).
TENANT_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@|-]{0,199}")
# The canonical spelling of an id, the only one Engram accepts (and the one it returns).
UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
UUID = re.compile(UUID_PATTERN)

# Whose private memory a transaction sees besides the tenant's shared memory (row-level security on
# episodes and their search documents reads `engram.principal`: migration 0035, and the opening of
# app/store/database.py): a principal's key (32 hex digits, `Principal.key`), SYSTEM for the
# server's own work (the embedding filler, reindexing, retention, the operator's commands), or
# NOBODY: the shared memory only, which is what a transaction that names no one gets.
SYSTEM = "system"
NOBODY = ""
VIEWER = re.compile(r"[0-9a-f]{32}|system|")
