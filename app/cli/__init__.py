"""The `engram` command: serve, migrate, the local database, and the administration of tenants, keys and users.

One module per command group, each adding its own subcommands (`COMMANDS`: name → adder):
serve (serve, token) · database (migrate, db; the CLI's one door to the store) · tenants (tenant,
hooks, cell, apikey) · accounts (user, member, revoke, keys, client) · records (audit, cursor-key,
usage, reindex, purge) · transfer (export, import) · backup (backup, restore).

Each command imports what it needs when it runs, so that `engram --help`, `--version` and the small
commands start in a fraction of a second instead of loading the server (the MCP SDK alone takes
over a second to import).
"""

from __future__ import annotations

import argparse

from app.cli import accounts, backup, database, records, serve, tenants, transfer
from app.cli.common import version

# The order `engram --help` lists the commands in.
ORDER = (
    "serve", "migrate", "db", "token", "tenant", "hooks", "cell", "apikey", "audit", "user", "member", "revoke",
    "keys", "client", "cursor-key", "usage", "reindex", "purge", "export", "import", "backup", "restore",
)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    """The whole command line: each group's commands, in `ORDER`."""
    made = argparse.ArgumentParser(prog="engram", description="Engram: knowledge-graph memory over MCP.")
    made.add_argument("--version", action="version", version=version())
    sub = made.add_subparsers(dest="command", required=True)
    adders = {}
    for group in (serve, database, tenants, accounts, records, transfer, backup):
        adders.update(group.COMMANDS)
    assert set(adders) == set(ORDER), "every command is listed once in ORDER"
    for name in ORDER:
        adders[name](sub)
    return made


def main(argv: list[str] | None = None) -> None:
    command_line = parser()
    args = command_line.parse_args(argv)
    if check := getattr(args, "check", None):  # what argparse cannot say: arguments that need each other
        check(command_line, args)
    args.func(args)
