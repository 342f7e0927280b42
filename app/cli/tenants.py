"""`engram tenant` (create, list, show, delete, set-limits, move), `engram hooks`, `engram cell`
and `engram apikey`: tenants, their settings and keys, and the cells they live on. Every change
goes through the operator service (app/services/operator/), on the tenant's cell."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.cli.common import UNSET, exiting, operator, read_settings, with_database
from app.scopes import ADMIN, READ, WRITE

if TYPE_CHECKING:
    from app.cli.common import Subparsers
    from app.config import Settings


def _mover(args: argparse.Namespace) -> Any:
    """The tenant mover over every cell this configuration has an owner URL for."""
    from app.services.moves import Mover, Timing

    settings = with_database(read_settings())
    grace = getattr(args, "grace", None)
    timing = Timing() if grace is None else Timing(grace_seconds=grace)
    return Mover(
        settings.admin_dsn(), settings.every_cell(), timing=timing, progress=lambda line: print(line, flush=True)
    )


def cmd_tenant_move(args: argparse.Namespace) -> None:
    """`engram tenant move KEY CELL` (again: continues), `--dry-run`, `--status`, `--finish KEY`,
    `--abort KEY`."""
    mover = _mover(args)
    if args.status:
        for m in exiting(mover.status):
            state = m.step if m.finished_at else ("switched" if m.switched_at else "running")
            error = f"\terror: {m.error}" if m.error else ""
            when = f"{m.updated_at:%Y-%m-%d %H:%M:%S}"
            print(f"{m.key}\t{m.source} -> {m.target}\t{state}\tstep {m.step}\tupdated {when}{error}")
        return
    if args.finish:
        exiting(lambda: mover.finish(args.tenant))
        return
    if args.abort:
        exiting(lambda: mover.abort(args.tenant))
        return
    if args.dry_run:
        plan = exiting(lambda: mover.plan(args.tenant, args.cell))
        print(f"would move tenant {plan.key} from cell {plan.source} to cell {plan.target}")
        if plan.done:
            print(f"done already: {', '.join(plan.done)}")
        print(f"steps: {', '.join(plan.todo)}; nothing was changed")
        return
    move = exiting(lambda: mover.move(args.tenant, args.cell))
    print(
        f"tenant {move.key} now lives on cell {move.target}; its old copy on cell {move.source} is dropped"
        f" after the grace period (`engram tenant move --finish {move.key}` or `engram cell cleanup`)"
    )


def cmd_tenant(args: argparse.Namespace) -> None:
    from dataclasses import asdict

    if args.action == "move":
        cmd_tenant_move(args)
        return
    tenants = operator().tenants
    if args.action == "create":
        made = exiting(lambda: tenants.create(args.tenant))
        print(f"tenant {args.tenant}: {made.id} (cell {made.cell})")
    elif args.action == "list":
        for r in exiting(tenants.listing):
            print(f"{r.key}\t{r.id}\t{r.cell}\t{r.created_at:%Y-%m-%d %H:%M}")
    elif args.action == "show":
        view = exiting(lambda: tenants.show(args.tenant))
        for k, v in {**asdict(view.record), **view.counts}.items():
            print(f"{k}: {v}")
        overrides = view.limits
        for k, v in _default_limits(read_settings()).items():
            print(f"limit.{k}: {overrides[k]} (set for this tenant)" if k in overrides else f"limit.{k}: {v} (default)")
        for k, v in view.usage.items():
            print(f"usage.{k}: {v}")
    elif args.action == "set-limits":
        changes = {k: v for k in _LIMIT_FLAGS if (v := getattr(args, k)) is not UNSET}
        if not changes:
            sys.exit("error: give at least one of " + ", ".join(f"--{k.replace('_', '-')}" for k in _LIMIT_FLAGS))
        exiting(lambda: tenants.set_limits(args.tenant, changes))
        shown = ", ".join(f"{k}={'default' if v is None else v}" for k, v in changes.items())
        print(f"tenant {args.tenant}: {shown} (servers apply it within ENGRAM_LIMITS_CACHE_SECONDS)")
    else:
        exiting(lambda: tenants.delete(args.tenant))
        print(f"tenant {args.tenant} and all its data deleted")


def cmd_hooks(args: argparse.Namespace) -> None:
    """A tenant's hook settings (docs/clients.md, "Controls"): show them, or set some."""
    settings = read_settings()
    if args.action == "show":
        own = exiting(lambda: operator().tenants.hooks(args.tenant))
        for name in _HOOK_FLAGS:
            value = own.get(name, getattr(settings, f"hook_{name}") if name != "deny" else [])
            print(f"{name}: {value} ({'set for this tenant' if name in own else 'default'})")
        return
    changes = {k: v for k in _HOOK_FLAGS if (v := getattr(args, f"hook_{k}")) is not UNSET}
    if not changes:
        sys.exit("error: give at least one of " + ", ".join(f"--{k.replace('_', '-')}" for k in _HOOK_FLAGS))
    exiting(lambda: operator().tenants.set_hooks(args.tenant, changes))
    shown = ", ".join(f"{k}={'default' if v is None else v}" for k, v in changes.items())
    print(f"tenant {args.tenant}: hooks {shown} (servers apply it within ENGRAM_LIMITS_CACHE_SECONDS)")


def _hook_value(name: str) -> Callable[[str], object]:
    """Parse one `engram hooks set` flag: `default` drops the tenant's own value."""

    def parse(text: str) -> object:
        from app.config import HOOK_EVENTS  # here, not at the parser's making: `engram --help` stays light
        from app.services.redaction import check_patterns

        if text == "default":
            return None
        try:
            if name in ("capture", "private"):
                if text not in ("on", "off"):
                    raise ValueError("on, off or default")
                return text == "on"
            if name in ("events", "deny"):
                items = [t.strip() for t in text.split(",") if t.strip()]
                if name == "deny":
                    return check_patterns(items)
                if unknown := set(items) - set(HOOK_EVENTS):
                    raise ValueError(f"unknown events {sorted(unknown)}; known: {', '.join(HOOK_EVENTS)}")
                return items
            value: float = float(text) if name == "min_score" else int(text)
            bound = 1 if name == "min_score" else 20_000
            if not 0 <= value <= bound:
                raise ValueError(f"from 0 to {bound}")
            return value
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


_HOOK_FLAGS = {
    "capture": "keep prompts and answers as episodes: on, off",
    "private": "keep captured turns in their user's private memory: on, off (off: the tenant's shared memory)",
    "events": "the events answered, comma-separated (SessionStart,UserPromptSubmit,Stop,...)",
    "deny": "globs of words to redact before storing, comma-separated (ACME-*,*.corp.example)",
    "prompt_tokens": "most tokens injected for one prompt (0: none)",
    "start_tokens": "most tokens of a session's brief (0: none)",
    "min_score": "fused recall score a fact needs to be injected (0-1)",
}


def cmd_cell(args: argparse.Namespace) -> None:
    """The directory of cells: register one (migrated first), list them, open, drain or fill one."""
    from app.cli.database import migrate_cell
    from app.errors import EngramError
    from app.services.operator.cells import CellDirectory

    if args.action == "cleanup":
        mover = _mover(args)
        print(f"{exiting(mover.cleanup)} moved tenants' old copies dropped")
        return
    if args.action == "list":
        ops = operator()
        configured = set(ops.owners.urls)
        for c in exiting(ops.cells.listing):
            bound = "-" if c.capacity is None else str(c.capacity)
            here = "" if c.name in configured else "\t(not configured here)"
            print(f"{c.name}\t{c.state}\tcapacity {bound}\t{c.tenants} tenants{here}")
        return
    try:
        name = CellDirectory.named(args.name or "")
    except EngramError as exc:
        sys.exit(f"error: {exc.message}")
    ops = operator()
    if args.action == "add":
        if (owner := ops.owners.urls.get(name)) is None:
            sys.exit(
                f"error: cell {name!r} is not configured: add it to ENGRAM_CELLS and set ENGRAM_CELL_{name.upper()}_URL"
            )
        done = migrate_cell(name, owner, read_settings().migrations_dir)
        print(f"cell {name}: " + ("applied: " + ", ".join(done) if done else "database schema is up to date"))
        capacity = None if args.capacity in (None, "none") else args.capacity
        added = exiting(lambda: ops.cells.add(name, capacity))
        print(f"cell {name} registered, open" if added else f"cell {name} was registered already (unchanged)")
    else:
        if args.state is None and args.capacity is None:
            sys.exit("error: give --state and/or --capacity")
        clear = args.capacity == "none"
        capacity = None if clear else args.capacity
        exiting(lambda: ops.cells.change(name, args.state, capacity, clear_capacity=clear))
        print(f"cell {name} changed (new tenants are placed by the new state at once)")


def _capacity(text: str) -> int | str:
    """`--capacity`: a number of tenants, or `none` for no bound."""
    if text == "none":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of tenants or `none`, not {text[:40]!r}") from None
    if not 0 <= value <= 10_000_000:
        raise argparse.ArgumentTypeError("a number of tenants from 0 to 10,000,000")
    return value


# `engram tenant set-limits` flags: each takes a number, or `default` to drop the tenant's own value.
_LIMIT_FLAGS: dict[str, type[float] | type[int]] = {
    "rate": float,
    "burst": int,
    "max_concurrent": int,
    "max_entities": int,
    "max_observations": int,
    "max_text_bytes": int,
    "deleted_retention_days": float,
}
_LIMIT_HELP = {
    "rate": "tool calls per second, refilling the burst (0: unlimited)",
    "burst": "tool calls at once before the rate applies",
    "max_concurrent": "tool calls running at once",
    "max_entities": "live entities (0: unlimited)",
    "max_observations": "observations of live entities (0: unlimited)",
    "max_text_bytes": "UTF-8 bytes of those observations (0: unlimited)",
    "deleted_retention_days": "days a soft-deleted entity is kept before it is erased for good",
}


def _limit_value(kind: type[float] | type[int]) -> Callable[[str], float | int | None]:
    def parse(text: str) -> float | int | None:
        if text == "default":
            return None
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a number or `default`, not {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError("must not be negative")
        return value

    return parse


def _default_limits(settings: Settings) -> dict[str, float | int]:
    return {
        "rate": settings.tenant_rate,
        "burst": settings.tenant_burst,
        "max_concurrent": settings.tenant_max_concurrent,
        "max_entities": settings.quota_entities,
        "max_observations": settings.quota_observations,
        "max_text_bytes": settings.quota_text_bytes,
        "deleted_retention_days": settings.deleted_retention_days,
    }


def cmd_apikey(args: argparse.Namespace) -> None:
    from app.auth import apikeys

    tenants = operator().tenants
    if args.action == "create":
        key_id, key, digest = apikeys.generate()
        expires = apikeys.expiry(args.expires_days)
        scopes = args.scope or [READ, WRITE]
        exiting(lambda: tenants.add_key(args.tenant, key_id, digest, scopes, args.name or "", expires))
        print(key)
        print(
            f"(key {key_id} for tenant {args.tenant}, scopes {' '.join(scopes)}; shown once, store it now)",
            file=sys.stderr,
        )
    elif args.action == "list":
        for r in exiting(lambda: tenants.keys(args.tenant)):
            state = "revoked" if r.revoked_at else (f"expires {r.expires_at:%Y-%m-%d}" if r.expires_at else "active")
            print(f"{r.id}\t{r.tenant}\t{' '.join(r.scopes)}\t{state}\t{r.name}")
    else:
        if not exiting(lambda: tenants.revoke_key(args.key_id)):
            sys.exit(f"error: no active key {args.key_id}")
        print(f"key {args.key_id} revoked (servers stop accepting it within ENGRAM_API_KEY_CACHE_SECONDS)")


def _check_tenant(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    moving = args.action == "move"
    if args.action != "list" and not args.tenant and not (moving and args.status):
        parser.error("tenant: give the tenant id")
    if moving and not (args.status or args.finish or args.abort or args.cell):
        parser.error("tenant move: give the cell to move the tenant to")
    if args.cell and not moving:
        parser.error(f"tenant {args.action}: takes no cell")


def _check_cell(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.action not in ("list", "cleanup") and not args.name:
        parser.error("cell: give the cell's name")


def _check_apikey(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.action == "create" and not args.tenant:
        parser.error("apikey create: --tenant is required")
    if args.action == "revoke" and not args.key_id:
        parser.error("apikey revoke: give the key id")


def add_tenant(sub: Subparsers) -> None:
    tenant = sub.add_parser("tenant", help="create, list, show or delete tenants")
    tenant.add_argument("action", choices=["create", "list", "show", "delete", "set-limits", "move"])
    tenant.add_argument("tenant", nargs="?", help="the tenant id (not for list)")
    tenant.add_argument("cell", nargs="?", help="with move: the cell to move it to")
    tenant.add_argument("--dry-run", action="store_true", help="with move: show the steps; change nothing")
    tenant.add_argument("--status", action="store_true", help="with move: the moves and their progress")
    tenant.add_argument("--finish", action="store_true", help="with move: drop the old copy of a switched move now")
    tenant.add_argument(
        "--abort", action="store_true", help="with move: undo a move that has not switched; the tenant stays"
    )
    tenant.add_argument("--grace", type=float, help="with move: seconds an old copy is kept (default 600)")
    for flag, kind in _LIMIT_FLAGS.items():
        tenant.add_argument(
            f"--{flag.replace('_', '-')}",
            dest=flag,
            type=_limit_value(kind),
            default=UNSET,
            help=f"with set-limits: {_LIMIT_HELP[flag]} (`default`: the server's setting)",
        )
    tenant.set_defaults(func=cmd_tenant, check=_check_tenant)


def add_hooks(sub: Subparsers) -> None:
    hooks = sub.add_parser("hooks", help="a tenant's hook settings: capture, events, deny-list, budgets")
    hooks.add_argument("action", choices=["show", "set"])
    hooks.add_argument("tenant", help="the tenant id")
    for flag, what in _HOOK_FLAGS.items():
        hooks.add_argument(
            f"--{flag.replace('_', '-')}",
            dest=f"hook_{flag}",
            metavar={"capture": "on|off", "events": "EVENT,…", "deny": "GLOB,…"}.get(flag, flag.split("_")[-1].upper()),
            type=_hook_value(flag),
            default=UNSET,
            help=f"with set: {what} (`default`: the server's setting)",
        )
    hooks.set_defaults(func=cmd_hooks)


def add_cell(sub: Subparsers) -> None:
    cell = sub.add_parser("cell", help="the cells tenants are placed on: add, list, or set one's state")
    cell.add_argument("action", choices=["add", "list", "set", "cleanup"])
    cell.add_argument("name", nargs="?", help="the cell's name (not for list)")
    cell.add_argument("--state", choices=["open", "draining", "full"], help="with set")
    cell.add_argument("--capacity", type=_capacity, help="most tenants placed on it, or `none` (add, set)")
    cell.add_argument("--grace", type=float, help="with cleanup: seconds a moved tenant's old copy is kept (600)")
    cell.set_defaults(func=cmd_cell, check=_check_cell)


def add_apikey(sub: Subparsers) -> None:
    apikey = sub.add_parser("apikey", help="API keys for headless agents")
    apikey.add_argument("action", choices=["create", "list", "revoke"])
    apikey.add_argument("key_id", nargs="?", help="with revoke: the key's id")
    apikey.add_argument("--tenant", help="with create (required) and list")
    apikey.add_argument("--scope", action="append", choices=[READ, WRITE, ADMIN])
    apikey.add_argument("--name", help="a label to recognise the key by")
    apikey.add_argument("--expires-days", type=int, help="lifetime in days (default: no expiry)")
    apikey.set_defaults(func=cmd_apikey, check=_check_apikey)


COMMANDS = {"tenant": add_tenant, "hooks": add_hooks, "cell": add_cell, "apikey": add_apikey}
