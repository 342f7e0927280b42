"""The `engram` command: serve, migrate, the local database, and the administration of tenants, keys and users.

Each command imports what it needs when it runs, so that `engram --help`, `--version` and the small
commands start in a fraction of a second instead of loading the server (the MCP SDK alone takes
over a second to import).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from app.auth.scopes import ADMIN, READ, WRITE

if TYPE_CHECKING:
    from app.authserver.accounts import Accounts
    from app.config import Settings

T = TypeVar("T")


def _version() -> str:
    from app.version import VERSION

    return f"engram {VERSION}"


def _settings() -> Settings:
    from pydantic import ValidationError

    from app.config import Settings

    try:
        return Settings()
    except ValidationError as exc:
        lines = [
            f"  ENGRAM_{'_'.join(str(p) for p in e['loc']).upper() or '(settings)'}: {e['msg']}" for e in exc.errors()
        ]
        sys.exit("configuration error:\n" + "\n".join(lines))


def _with_database(settings: Settings) -> Settings:
    from app import provision

    try:
        return provision.with_local_database(settings)
    except provision.ProvisionError as exc:
        sys.exit(f"error: {exc}")


def _port_taken(host: str, port: int) -> str:
    """Why `engram serve` could not listen on host:port, or "" (checked before loading anything)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return ""


def cmd_serve(args: argparse.Namespace) -> None:
    import logging

    from app import allocator
    from app.embeddings import factory

    settings = _with_database(_settings())
    try:
        settings.check_serving()
    except ValueError as exc:
        sys.exit(f"configuration error:\n  {exc}")
    from app.health import preflight

    for port, setting in ((settings.port, "ENGRAM_PORT"), (settings.metrics_port, "ENGRAM_METRICS_PORT")):
        if port and (taken := _port_taken(settings.host, port)):
            sys.exit(f"error: {settings.host}:{port} is in use ({taken}): stop what listens there, or set {setting}")
    if problem := asyncio.run(preflight(settings.runtime_dsn(), settings.database_wait_seconds)):
        sys.exit(f"error: {problem}")
    allocator.limit_arenas()  # before any thread starts (docs/operations.md, "Memory")
    factory.preload(settings)  # the model loads on its own thread while the server's code is imported

    import uvicorn

    from app.observability.logging import configure
    from app.server import create_app

    configure(settings.log_level)
    if settings.auth_mode == "dev":
        logging.getLogger("engram").warning(
            "DEV AUTH MODE: tokens are signed by a local key (`engram token`); bound to %s only", settings.host
        )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=settings.shutdown_grace_seconds,
        log_level=settings.log_level.lower(),
        log_config=None,  # our JSON logging, configured above
        access_log=False,  # engram.access writes the access log
        proxy_headers=False,
        limit_concurrency=settings.http_max_concurrency,  # beyond it: 503 at once, before any work
        timeout_keep_alive=settings.http_keepalive_seconds,
        h11_max_incomplete_event_size=settings.http_max_header_bytes,  # the h11 parser's bound, if used
    )


def cmd_migrate(args: argparse.Namespace) -> None:
    """The control database (the cell `main`), then every other cell ENGRAM_CELLS names, each with its
    tenant steps; a cell without an owner URL here is reported and skipped."""
    import asyncpg

    from app.store import migrate

    settings = _with_database(_settings())
    several = bool(settings.cells)
    for name, dsn in _cell_admin_dsns(settings):
        prefix = f"cell {name}: " if several else ""
        if dsn is None:
            print(f"{prefix}skipped: no ENGRAM_CELL_{name.upper()}_URL or _ADMIN_URL here", file=sys.stderr)
            continue
        try:
            if args.status or args.dry_run:
                if several:
                    print(f"cell {name}")
                _print_plan(asyncio.run(migrate.plan(dsn, settings.migrations_dir)), dry_run=args.dry_run)
                continue
            run = migrate.migrate(dsn, settings.migrations_dir, on_tenant=_tenant_progress, jobs=args.jobs)
            done = asyncio.run(run)
        except migrate.MigrationError as exc:
            sys.exit(f"{prefix}migration error: {exc}")
        except asyncpg.InsufficientPrivilegeError as exc:
            sys.exit(
                f"{prefix}migration error: {exc}: migrations run as the database's owner "
                "(ENGRAM_ADMIN_DATABASE_URL), not the run-time role"
            )
        except (OSError, asyncpg.PostgresError) as exc:
            sys.exit(f"{prefix}migration error: cannot reach the database: {exc}")
        print(prefix + ("applied: " + ", ".join(done) if done else "database schema is up to date"))


def _cell_admin_dsns(settings: Settings) -> list[tuple[str, str | None]]:
    """Each cell's owner URL (None where this configuration has none), `main` first."""
    from app.config import MAIN_CELL

    return [(name, urls.admin() if (urls := settings.cell(name)) else None) for name in [MAIN_CELL, *settings.cells]]


def _tenant_progress(done: int, waiting: int) -> None:
    """One line per 100 tenants brought up to date (and the last), on stderr."""
    if done % 100 == 0 or done == waiting:
        print(f"tenant steps: {done}/{waiting} tenants brought up to date", file=sys.stderr, flush=True)


def _print_plan(plan: Any, *, dry_run: bool) -> None:
    steps = plan.steps
    print(f"migrations: {len(plan.applied)} applied, {len(plan.pending)} pending")
    for m in plan.pending:
        note = " (registers a tenant step)" if m.registers_step else ""
        print(f"  {'would apply' if dry_run else 'pending'}: {m.name}{note}")
    print(f"tenants: {steps.tenants}; newest tenant step {steps.newest or '(none)'}; {steps.waiting} waiting for steps")
    for version, count in steps.by_version:
        print(f"  last step {version or '(none)'}: {count} tenants")
    if dry_run:
        with_steps = any(m.registers_step for m in plan.pending)
        upgrade = steps.tenants if with_steps else steps.waiting
        print(f"would bring {upgrade} tenants up to date, each in a transaction of its own; nothing was changed")


def cmd_db(args: argparse.Namespace) -> None:
    from app import provision

    try:
        if args.action == "up":
            provision.up()
        elif args.action == "down":
            provision.down()
        elif args.action == "status":
            print(provision.status())
        else:
            settings = _with_database(_settings())
            print(settings.admin_dsn() if args.admin else settings.runtime_dsn())
    except provision.ProvisionError as exc:
        sys.exit(f"error: {exc}")


def cmd_token(args: argparse.Namespace) -> None:
    from app.auth.devkeys import mint_token

    settings = _settings()
    if settings.auth_mode != "dev":
        sys.exit("error: `engram token` mints development tokens; it needs ENGRAM_AUTH_MODE=dev")
    scopes = tuple(args.scope or (READ, WRITE))
    print(mint_token(settings, tenant=args.tenant, subject=args.subject, scopes=scopes, ttl=args.ttl))


def _exiting(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `main()`; a domain error exits with its message."""
    from app.errors import EngramError

    try:
        return asyncio.run(main())
    except EngramError as exc:
        sys.exit(f"error: {exc.message}")


def _admin(work: Callable[[Any], Awaitable[T]]) -> T:
    """Run `work(conn)` on an owner connection; domain errors exit with their message."""
    import asyncpg

    from app.store.connect import init_connection

    settings = _with_database(_settings())

    async def run() -> T:
        conn = await asyncpg.connect(settings.admin_dsn())
        await init_connection(conn)
        try:
            return await work(conn)
        finally:
            await conn.close()

    return _exiting(run)


async def _on_cell(settings: Settings, cell: str) -> Any:
    """An owner connection to `cell`'s database; `unavailable` where this configuration has no URL for it."""
    import asyncpg

    from app.errors import EngramError
    from app.store.connect import init_connection

    urls = settings.cell(cell)
    dsn = urls.admin() if urls else None
    if dsn is None:
        raise EngramError("unavailable", f"cell {cell!r} has no ENGRAM_CELL_{cell.upper()}_URL or _ADMIN_URL here")
    conn = await asyncpg.connect(dsn)
    await init_connection(conn)
    return conn


def _every_cell(work: Callable[[Any], Awaitable[T]]) -> list[tuple[str, T]]:
    """`work(conn)` on an owner connection to every cell's database, `main` first, with the cell's
    name: a tenant's audit, usage and limits live on its cell. A cell with no URL here is skipped,
    and said so on stderr."""
    settings = _with_database(_settings())

    async def run() -> list[tuple[str, T]]:
        found = []
        for name, dsn in _cell_admin_dsns(settings):
            if dsn is None:
                print(f"cell {name}: skipped: no ENGRAM_CELL_{name.upper()}_URL or _ADMIN_URL here", file=sys.stderr)
                continue
            conn = await _on_cell(settings, name)
            try:
                found.append((name, await work(conn)))
            finally:
                await conn.close()
        return found

    return _exiting(run)


def _admin_tenant(key: str, work: Callable[[Any, Any], Awaitable[T]], *, create: bool = False) -> T:
    """Run `work(control, cell)` on owner connections to the control database and the tenant's
    cell (the same connection for `main`); with `create`, the tenant is placed and made first."""
    from app.config import MAIN_CELL
    from app.store import tenants

    settings = _settings()

    async def run(control: Any) -> T:
        if create:
            made = await tenants.create(control, key)
            cell = made.cell
        else:
            cell = await tenants.cell_of(control, key)
        if cell == MAIN_CELL:
            return await work(control, control)
        conn = await _on_cell(settings, cell)
        try:
            if create:
                await tenants.adopt(conn, made)
            return await work(control, conn)
        finally:
            await conn.close()

    return _admin(run)


def _mover(args: argparse.Namespace) -> Any:
    """The tenant mover over every cell this configuration has an owner URL for."""
    from app.services.moves import Mover, Timing

    settings = _with_database(_settings())
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
        for m in _exiting(mover.status):
            state = m.step if m.finished_at else ("switched" if m.switched_at else "running")
            error = f"\terror: {m.error}" if m.error else ""
            when = f"{m.updated_at:%Y-%m-%d %H:%M:%S}"
            print(f"{m.key}\t{m.source} -> {m.target}\t{state}\tstep {m.step}\tupdated {when}{error}")
        return
    if args.finish:
        _exiting(lambda: mover.finish(args.tenant))
        return
    if args.abort:
        _exiting(lambda: mover.abort(args.tenant))
        return
    if args.dry_run:
        plan = _exiting(lambda: mover.plan(args.tenant, args.cell))
        print(f"would move tenant {plan.key} from cell {plan.source} to cell {plan.target}")
        if plan.done:
            print(f"done already: {', '.join(plan.done)}")
        print(f"steps: {', '.join(plan.todo)}; nothing was changed")
        return
    move = _exiting(lambda: mover.move(args.tenant, args.cell))
    print(
        f"tenant {move.key} now lives on cell {move.target}; its old copy on cell {move.source} is dropped"
        f" after the grace period (`engram tenant move --finish {move.key}` or `engram cell cleanup`)"
    )


def cmd_tenant(args: argparse.Namespace) -> None:
    from dataclasses import asdict

    from app.store import tenants

    if args.action == "move":
        cmd_tenant_move(args)
    elif args.action == "create":
        made = _admin_tenant(args.tenant, lambda c, _: tenants.create(c, args.tenant), create=True)
        print(f"tenant {args.tenant}: {made.id} (cell {made.cell})")
    elif args.action == "list":
        for r in _admin(tenants.list_all):
            print(f"{r.key}\t{r.id}\t{r.cell}\t{r.created_at:%Y-%m-%d %H:%M}")
    elif args.action == "show":
        view = _admin_tenant(args.tenant, lambda c, cell: tenants.show(c, args.tenant, cell))
        for k, v in {**asdict(view.record), **view.counts}.items():
            print(f"{k}: {v}")
        overrides = view.limits
        for k, v in _default_limits(_settings()).items():
            print(f"limit.{k}: {overrides[k]} (set for this tenant)" if k in overrides else f"limit.{k}: {v} (default)")
        for k, v in view.usage.items():
            print(f"usage.{k}: {v}")
    elif args.action == "set-limits":
        changes = {k: v for k in _LIMIT_FLAGS if (v := getattr(args, k)) is not _UNSET}
        if not changes:
            sys.exit("error: give at least one of " + ", ".join(f"--{k.replace('_', '-')}" for k in _LIMIT_FLAGS))
        _admin_tenant(args.tenant, lambda _, cell: tenants.set_limits(cell, args.tenant, changes))
        shown = ", ".join(f"{k}={'default' if v is None else v}" for k, v in changes.items())
        print(f"tenant {args.tenant}: {shown} (servers apply it within ENGRAM_LIMITS_CACHE_SECONDS)")
    else:
        _admin_tenant(args.tenant, lambda c, cell: tenants.delete(c, args.tenant, cell))
        print(f"tenant {args.tenant} and all its data deleted")


def cmd_hooks(args: argparse.Namespace) -> None:
    """A tenant's hook settings (docs/clients.md, "Controls"): show them, or set some."""
    from app.store import tenants

    settings = _settings()
    if args.action == "show":
        own = _admin_tenant(args.tenant, lambda _, cell: tenants.hook_view(cell, args.tenant))
        for name in _HOOK_FLAGS:
            value = own.get(name, getattr(settings, f"hook_{name}") if name != "deny" else [])
            print(f"{name}: {value} ({'set for this tenant' if name in own else 'default'})")
        return
    changes = {k: v for k in _HOOK_FLAGS if (v := getattr(args, f"hook_{k}")) is not _UNSET}
    if not changes:
        sys.exit("error: give at least one of " + ", ".join(f"--{k.replace('_', '-')}" for k in _HOOK_FLAGS))
    _admin_tenant(args.tenant, lambda _, cell: tenants.set_hooks(cell, args.tenant, changes))
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
            if name == "capture":
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
    "events": "the events answered, comma-separated (SessionStart,UserPromptSubmit,Stop,...)",
    "deny": "globs of words to redact before storing, comma-separated (ACME-*,*.corp.example)",
    "prompt_tokens": "most tokens injected for one prompt (0: none)",
    "start_tokens": "most tokens of a session's brief (0: none)",
    "min_score": "fused recall score a fact needs to be injected (0-1)",
}


def cmd_cell(args: argparse.Namespace) -> None:
    """The directory of cells: register one (migrated first), list them, open, drain or fill one."""
    from app.errors import EngramError
    from app.store import cells, migrate

    settings = _settings()
    if args.action == "cleanup":
        mover = _mover(args)
        print(f"{_exiting(mover.cleanup)} moved tenants' old copies dropped")
        return
    if args.action == "list":
        configured = {"main", *settings.cells}
        for c in _admin(cells.listing):
            bound = "-" if c.capacity is None else str(c.capacity)
            here = "" if c.name in configured else "\t(not configured here)"
            print(f"{c.name}\t{c.state}\tcapacity {bound}\t{c.tenants} tenants{here}")
        return
    try:
        name = cells.check_name(args.name or "")
        if name == "main":
            raise EngramError("invalid", "`main` is the control database: it is always registered")
    except EngramError as exc:
        sys.exit(f"error: {exc.message}")
    if args.action == "add":
        urls = settings.cell(name)
        owner = urls.admin() if urls else None
        if owner is None:
            sys.exit(
                f"error: cell {name!r} is not configured: add it to ENGRAM_CELLS and set ENGRAM_CELL_{name.upper()}_URL"
            )
        try:
            done = asyncio.run(migrate.migrate(owner, settings.migrations_dir, on_tenant=_tenant_progress))
        except (migrate.MigrationError, OSError) as exc:
            sys.exit(f"error: cell {name!r} could not be migrated: {exc}")
        print(f"cell {name}: " + ("applied: " + ", ".join(done) if done else "database schema is up to date"))
        capacity = None if args.capacity in (None, "none") else args.capacity
        added = _admin(lambda c: cells.add(c, name, capacity))
        print(f"cell {name} registered, open" if added else f"cell {name} was registered already (unchanged)")
    else:
        if args.state is None and args.capacity is None:
            sys.exit("error: give --state and/or --capacity")
        clear = args.capacity == "none"
        capacity = None if clear else args.capacity
        _admin(lambda c: cells.set_state(c, name, args.state, capacity, clear_capacity=clear))
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
_LIMIT_FLAGS = {
    "rate": float,
    "burst": int,
    "max_concurrent": int,
    "max_entities": int,
    "max_observations": int,
    "max_text_bytes": int,
    "deleted_retention_days": float,
}
_UNSET = object()
_LIMIT_HELP = {
    "rate": "tool calls per second, refilling the burst (0: unlimited)",
    "burst": "tool calls at once before the rate applies",
    "max_concurrent": "tool calls running at once",
    "max_entities": "live entities (0: unlimited)",
    "max_observations": "observations of live entities (0: unlimited)",
    "max_text_bytes": "UTF-8 bytes of those observations (0: unlimited)",
    "deleted_retention_days": "days a soft-deleted entity is kept before it is erased for good",
}


def _limit_value(kind: type) -> object:
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
    from app.store import tenants

    if args.action == "create":
        key_id, key, digest = apikeys.generate()
        expires = apikeys.expiry(args.expires_days)
        scopes = args.scope or [READ, WRITE]
        _admin(lambda c: tenants.add_key(c, args.tenant, key_id, digest, scopes, args.name or "", expires))
        print(key)
        print(
            f"(key {key_id} for tenant {args.tenant}, scopes {' '.join(scopes)}; shown once, store it now)",
            file=sys.stderr,
        )
    elif args.action == "list":
        for r in _admin(lambda c: tenants.list_keys(c, args.tenant)):
            state = "revoked" if r.revoked_at else (f"expires {r.expires_at:%Y-%m-%d}" if r.expires_at else "active")
            print(f"{r.id}\t{r.tenant}\t{' '.join(r.scopes)}\t{state}\t{r.name}")
    else:
        if not _admin(lambda c: tenants.revoke_key(c, args.key_id)):
            sys.exit(f"error: no active key {args.key_id}")
        print(f"key {args.key_id} revoked (servers stop accepting it within ENGRAM_API_KEY_CACHE_SECONDS)")


def _password(args: argparse.Namespace) -> str:
    """A new password: one line of standard input with --password-stdin, else asked twice."""
    import getpass

    from app.authserver.credentials import password_rule

    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            sys.exit("error: the passwords differ")
    if (problem := password_rule(password)) is not None:
        sys.exit(f"error: {problem}")
    return password


def _accounts(work: Callable[[Accounts], Awaitable[T]]) -> T:
    """Run `work(accounts)` with the authorization server's account service, on an owner connection:
    the same rules and events as the console's."""
    from datetime import timedelta

    from app.authserver.accounts import Accounts, Throttle
    from app.authserver.events import Events
    from app.authserver.limits import RateLimiter
    from app.store.database import Database

    settings = _with_database(_settings())

    async def run() -> T:
        db = Database(
            settings.admin_dsn(),
            min_size=1,
            max_size=1,
            statement_timeout_ms=settings.statement_timeout_ms,
            acquire_seconds=settings.pool_acquire_seconds,
            call_deadline=_OPERATOR_DEADLINE,
            create_tenants=False,
        )
        await db.open()
        try:
            accounts = Accounts(
                db,
                RateLimiter(db),
                Events(db),
                issuer=settings.issuer,
                session_ttl=timedelta(hours=12),
                throttle=Throttle(),
                personal_tenants=False,
            )
            return await work(accounts)
        finally:
            await db.close()

    return _exiting(run)


_OPERATOR_DEADLINE = 60.0  # seconds an operator's account command may take


def cmd_user(args: argparse.Namespace) -> None:
    """Local accounts of the built-in authorization server."""
    from app.authserver.credentials import hash_password

    name = (args.username or "").lower()
    if args.action == "add":
        digest = asyncio.run(hash_password(_password(args)))
        user = _accounts(lambda a: a.add_user(name, args.display_name or "", digest))
        print(f"user {user.username} added ({user.id})")
    elif args.action == "passwd":
        digest = asyncio.run(hash_password(_password(args)))
        _accounts(lambda a: a.set_password(name, digest, sign_out=not args.keep_sessions))
        print(f"password of {name} changed" + ("" if args.keep_sessions else "; signed out everywhere"))
    elif args.action in ("disable", "enable"):
        _accounts(lambda a: a.set_disabled(name, args.action == "disable"))
        print(f"user {name} {args.action}d")
    else:
        for user, created in _accounts(lambda a: a.users()):
            state = "disabled" if user.disabled else "active"
            kind = "password" if user.password_hash else "upstream"
            print(f"{user.username}\t{state}\t{kind}\t{created:%Y-%m-%d}\t{user.display_name}")


def cmd_member(args: argparse.Namespace) -> None:
    """Which tenants a user belongs to, and with which role."""
    if args.action == "list":
        for username, tenant, role in _accounts(lambda a: a.memberships(args.tenant)):
            print(f"{tenant}\t{username}\t{role}")
        return
    if not (args.username and args.tenant):
        sys.exit("error: member add/remove need a username and --tenant")
    name = args.username.lower()
    if args.action == "add":
        _accounts(lambda a: a.set_member(args.tenant, name, args.role, "an operator"))
    else:
        _accounts(lambda a: a.remove_member(args.tenant, name, "an operator"))
    print(f"{name} {'is ' + args.role + ' of' if args.action == 'add' else 'removed from'} {args.tenant}")


def cmd_revoke(args: argparse.Namespace) -> None:
    """Everything a user, a client, or a user through one client holds: grants (with their refresh
    and access tokens) and remembered consents."""
    count = _accounts(lambda a: a.revoke(args.user, args.client))
    print(f"{count} grant(s) revoked; their tokens stop working within seconds")


def cmd_keys(args: argparse.Namespace) -> None:
    """Signing keys of the built-in authorization server."""
    from datetime import timedelta

    from app.authserver.signing import rotate
    from app.store import oauth

    if args.action == "rotate":
        settings = _settings()
        activate = timedelta(seconds=args.activate_in)
        retire = timedelta(seconds=settings.access_token_ttl_seconds + 300)
        kid = _admin(lambda c: rotate(c, activate_in=activate, retire_after=retire))
        print(f"key {kid} signs from {args.activate_in} s from now; older keys verify for {retire} after that")
        return
    for key in _admin(oauth.signing_keys):
        retires = f"retires {key.retires_at:%Y-%m-%d %H:%M}" if key.retires_at else "current"
        print(f"{key.kid}\tactivates {key.activates_at:%Y-%m-%d %H:%M:%S}\t{retires}")


def cmd_client(args: argparse.Namespace) -> None:
    """OAuth clients: configured ones (`add`), and all registered ones."""
    from mcp.shared.auth import OAuthClientInformationFull

    from app.authserver.clients import check_metadata
    from app.authserver.credentials import new_secret
    from app.store import oauth

    if args.action == "add":
        secret, secret_hash = new_secret() if args.confidential else (None, None)
        info = OAuthClientInformationFull(
            client_id=args.client_id,
            client_name=args.name or args.client_id,
            redirect_uris=args.redirect_uri,
            token_endpoint_auth_method="client_secret_basic" if secret else "none",
        )
        check_metadata(info)
        metadata = info.model_dump(mode="json", exclude_none=True, exclude={"client_id"})
        _admin(lambda c: oauth.add_client(c, args.client_id, "static", metadata, secret_hash))
        print(f"client {args.client_id} added" + (f"; its secret (shown once): {secret}" if secret else ""))
    elif args.action == "remove":
        _accounts(lambda a: a.revoke(None, args.client_id))
        if not _admin(lambda c: oauth.remove_client(c, args.client_id)):
            sys.exit(f"error: no client {args.client_id}")
        print(f"client {args.client_id} removed and its grants revoked")
    else:
        for client, created, used in _admin(oauth.list_clients):
            name = client.metadata.get("client_name", "")
            print(f"{client.client_id}\t{client.kind}\t{name}\tcreated {created:%Y-%m-%d}\tused {used or 'never'}")


def cmd_cursor_key(args: argparse.Namespace) -> None:
    from app.services.cursors import KEY_REFRESH
    from app.store import cursor_keys

    retire_after = _settings().cursor_max_age_seconds + KEY_REFRESH
    key_id, retired = _admin(lambda c: cursor_keys.rotate(c, retire_after))
    print(f"added cursor key {key_id}; servers sign with it within {KEY_REFRESH:.0f} s and accept the older ones")
    if retired:
        print("removed keys whose cursors have all expired: " + ", ".join(retired))


def cmd_audit(args: argparse.Namespace) -> None:
    from datetime import UTC, datetime, timedelta

    from app.store import audit

    if args.action == "auth":
        from app.store import oauth

        since = datetime.now(UTC) - timedelta(days=args.days) if args.days else None
        for r in _admin(lambda c: oauth.events(c, args.limit, since)):
            print(
                f"{r.at:%Y-%m-%d %H:%M:%S}\t{r.event}\t{r.outcome}\t{r.username or '-'}\t"
                f"{r.client_id or '-'}\t{r.tenant_key or '-'}\t{r.detail}"
            )
        return
    if args.action == "cleanup":  # on every cell: a tenant's audit rows are written on its cell
        days = _settings().audit_retention_days
        done = _every_cell(lambda c: audit.cleanup(c, days))
        for name, removed in done:
            where = f" on cell {name}" if len(done) > 1 else ""
            print(f"removed {removed} audit rows older than {days} days{where}")
        return
    since = datetime.now(UTC) - timedelta(days=args.days) if args.days else None
    pages = _every_cell(lambda c: audit.admin_page(c, args.tenant, args.limit, since))
    for row in audit.newest(args.limit, (row for _, page in pages for row in page)):
        print(
            f"{row.at:%Y-%m-%d %H:%M:%S}\t{row.tenant}\t{row.subject}\t{row.tool}\t"
            f"{len(row.affected)} changed\t{row.duration_ms:.1f} ms\t{row.request_id}"
        )


def cmd_usage(args: argparse.Namespace) -> None:
    from app.store import audit

    found = _every_cell(lambda c: audit.usage(c, args.tenant, args.days))
    for r in audit.in_order(r for _, rows in found for r in rows):
        print(f"{r.day}\t{r.tenant}\t{r.tool}\t{r.calls} calls\t{r.errors} errors")


def cmd_reindex(args: argparse.Namespace) -> None:
    """Re-embed every text with the configured model, tenant by tenant; safe to stop and run again."""
    import logging
    import math

    from app.embeddings.provider import EmbeddingError
    from app.errors import EngramError
    from app.observability.context import deadline
    from app.services.indexing import Indexer
    from app.store.database import Database, Tenant

    settings = _with_database(_settings())
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")

    def progress(tenant: Tenant, done: int, total: int) -> None:
        width = 30
        filled = width * done // total if total else width
        line = f"{tenant.key[:40]:<40} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} texts"
        if sys.stderr.isatty():
            print(f"\r{line}", end="" if done < total else "\n", file=sys.stderr, flush=True)
        elif done in (0, total) or done % 1000 < settings.embedding_batch_size:
            print(line, file=sys.stderr, flush=True)

    async def run() -> str:
        db = Database.from_settings(settings)
        await db.open()
        indexer = Indexer.from_settings(db, settings)
        try:
            await indexer.start(fill=False)
            await indexer.register()
            assert indexer.model is not None
            with deadline(math.inf):  # a maintenance job: its transactions run as long as they need
                report = await indexer.reindex(args.tenant or (), max_texts=args.max_texts, progress=progress)
        finally:
            await indexer.stop()
            await db.close()
        if not report.complete:
            return f"stopped after {report.texts} texts; run `engram reindex` again to go on"
        current = f"; {indexer.model.name} is now the current model" if report.current else ""
        return f"{report.tenants} tenant(s), {report.texts} texts embedded{current}"

    try:
        print(asyncio.run(run()))
    except (EngramError, EmbeddingError) as exc:
        sys.exit(f"reindex error: {exc}")


def cmd_purge(args: argparse.Namespace) -> None:
    """Erase entities of a tenant for good (as purge_entities does): first what would go, then,
    with --confirm N naming that number of entities, the purge. The audit log records it."""
    import getpass

    from app.auth.principal import ADMIN, Principal
    from app.errors import EngramError
    from app.services import Services
    from app.services.indexing import Indexer
    from app.store.database import Database

    settings = _with_database(_settings())
    who = Principal(
        subject=f"operator:{getpass.getuser()}", client_id="engram-cli", tenant=args.tenant,
        scopes=frozenset({ADMIN}), issuer="",
    )  # fmt: skip

    async def run() -> str:
        db = Database.from_settings(settings)
        await db.open()
        try:
            indexer = Indexer(db, None, batch_size=settings.embedding_batch_size)
            services = Services.from_settings(settings, db, indexer)
            result = await services.purges.purge(who, args.match, confirm=args.confirm, episodes=args.episodes)
        finally:
            await db.close()
        shown = "".join(f"\n  {name}" for name in result.names)
        return result.summary + shown

    try:
        print(asyncio.run(run()))
    except EngramError as exc:
        sys.exit(f"purge error: {exc}")


def cmd_export(args: argparse.Namespace) -> None:
    from app import cli_transfer

    cli_transfer.export(_with_database(_settings()), args)


def cmd_import(args: argparse.Namespace) -> None:
    from app import cli_transfer

    cli_transfer.import_(_with_database(_settings()), args)


def cmd_backup(args: argparse.Namespace) -> None:
    from app import cli_backup

    cli_backup.run_backup(_with_database(_settings()), args)


def cmd_restore(args: argparse.Namespace) -> None:
    from app import cli_backup

    cli_backup.run_restore(_with_database(_settings()), args)


def _backup_commands(sub: Any) -> None:
    made = sub.add_parser("backup", help="write the whole database (or one tenant) to a file, consistently")
    made.add_argument("file", type=Path, help="the file to write (must not exist)")
    made.add_argument("--tenant", help="only this tenant: its memory, limits, API keys, usage and audit")
    made.set_defaults(func=cmd_backup)
    back = sub.add_parser("restore", help="load a backup into this database (see docs/operations.md)")
    back.add_argument("file", type=Path)
    back.set_defaults(func=cmd_restore)


_FORMATS = ["engram", "memory", "neo4j"]


def _transfer_commands(sub: Any) -> None:
    export = sub.add_parser("export", help="write a tenant's memory to a file (or standard output)")
    export.add_argument("--tenant", required=True)
    export.add_argument(
        "--format", choices=_FORMATS, default="engram", help="engram (default, lossless), memory, neo4j"
    )
    export.add_argument("--include-deleted", action="store_true", help="engram: soft-deleted entities too")
    export.add_argument("--history", action="store_true", help="engram: the history of changes too")
    export.add_argument("-o", "--output", type=Path, help="the file to write (default: standard output)")
    export.set_defaults(func=cmd_export)
    imp = sub.add_parser("import", help="read a file into a tenant's memory; run again to resume")
    imp.add_argument("--tenant", required=True)
    imp.add_argument("file", type=Path)
    imp.add_argument("--format", choices=_FORMATS, help="default: told by the file's first line")
    imp.add_argument(
        "--on-existing",
        choices=["merge", "skip", "error"],
        default="merge",
        help="an entity that exists: merge the file's fields and observations into it (default), leave it, "
        "or refuse the line",
    )
    imp.add_argument("--dry-run", action="store_true", help="check and count everything, write nothing")
    imp.add_argument("--json", action="store_true", help="print the summary as JSON")
    imp.set_defaults(func=cmd_import)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="engram", description="Engram: knowledge-graph memory over MCP.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the HTTP server").set_defaults(func=cmd_serve)
    mig = sub.add_parser("migrate", help="apply pending database migrations, then the tenant steps they add")
    mig.add_argument("--status", action="store_true", help="show what is applied and which tenants wait for steps")
    mig.add_argument("--dry-run", action="store_true", help="show what would be applied; change nothing")
    mig.add_argument(
        "--jobs", type=int, choices=range(1, 17), default=1, metavar="1-16",
        help="tenants brought up to date at once, each on a connection of its own (default 1)",
    )  # fmt: skip
    mig.set_defaults(func=cmd_migrate)
    db = sub.add_parser("db", help="the local development database")
    db.add_argument("action", choices=["up", "down", "status", "url"])
    db.add_argument("--admin", action="store_true", help="with url: the owner's URL, used for migrations")
    db.set_defaults(func=cmd_db)
    token = sub.add_parser("token", help="print a development access token")
    token.add_argument("--tenant", required=True, help="tenant id the token grants access to")
    token.add_argument("--subject", default="dev-user", help="the user the token stands for")
    token.add_argument(
        "--scope",
        action="append",
        choices=[READ, WRITE, ADMIN],
        help="repeat for several (default: memory:read and memory:write)",
    )
    token.add_argument("--ttl", type=int, help="lifetime in seconds (default ENGRAM_TOKEN_TTL_SECONDS)")
    token.set_defaults(func=cmd_token)
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
            type=_limit_value(kind),  # type: ignore[arg-type]
            default=_UNSET,
            help=f"with set-limits: {_LIMIT_HELP[flag]} (`default`: the server's setting)",
        )
    tenant.set_defaults(func=cmd_tenant)
    hooks = sub.add_parser("hooks", help="a tenant's hook settings: capture, events, deny-list, budgets")
    hooks.add_argument("action", choices=["show", "set"])
    hooks.add_argument("tenant", help="the tenant id")
    for flag, what in _HOOK_FLAGS.items():
        hooks.add_argument(
            f"--{flag.replace('_', '-')}",
            dest=f"hook_{flag}",
            metavar={"capture": "on|off", "events": "EVENT,…", "deny": "GLOB,…"}.get(flag, flag.split("_")[-1].upper()),
            type=_hook_value(flag),
            default=_UNSET,
            help=f"with set: {what} (`default`: the server's setting)",
        )
    hooks.set_defaults(func=cmd_hooks)
    cell = sub.add_parser("cell", help="the cells tenants are placed on: add, list, or set one's state")
    cell.add_argument("action", choices=["add", "list", "set", "cleanup"])
    cell.add_argument("name", nargs="?", help="the cell's name (not for list)")
    cell.add_argument("--state", choices=["open", "draining", "full"], help="with set")
    cell.add_argument("--capacity", type=_capacity, help="most tenants placed on it, or `none` (add, set)")
    cell.add_argument("--grace", type=float, help="with cleanup: seconds a moved tenant's old copy is kept (600)")
    cell.set_defaults(func=cmd_cell)
    apikey = sub.add_parser("apikey", help="API keys for headless agents")
    apikey.add_argument("action", choices=["create", "list", "revoke"])
    apikey.add_argument("key_id", nargs="?", help="with revoke: the key's id")
    apikey.add_argument("--tenant", help="with create (required) and list")
    apikey.add_argument("--scope", action="append", choices=[READ, WRITE, ADMIN])
    apikey.add_argument("--name", help="a label to recognise the key by")
    apikey.add_argument("--expires-days", type=int, help="lifetime in days (default: no expiry)")
    apikey.set_defaults(func=cmd_apikey)
    audit = sub.add_parser("audit", help="read the audit log, or remove rows past retention")
    audit.add_argument("action", nargs="?", choices=["show", "auth", "cleanup"], default="show")
    audit.add_argument("--tenant")
    audit.add_argument("--limit", type=int, default=100)
    audit.add_argument("--days", type=int, help="only the last N days")
    audit.set_defaults(func=cmd_audit)
    user = sub.add_parser("user", help="local accounts of the built-in authorization server")
    user.add_argument("action", choices=["add", "passwd", "disable", "enable", "list"])
    user.add_argument("username", nargs="?")
    user.add_argument("--display-name", help="with add: the name shown on pages")
    user.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    user.add_argument(
        "--keep-sessions",
        action="store_true",
        help="with passwd: change only the password (by default the user is signed out everywhere)",
    )
    user.set_defaults(func=cmd_user)
    member = sub.add_parser("member", help="which tenants a user may give applications access to")
    member.add_argument("action", choices=["add", "remove", "list"])
    member.add_argument("username", nargs="?")
    member.add_argument("--tenant", help="the tenant id (required for add and remove)")
    member.add_argument("--role", choices=["reader", "writer", "admin"], default="writer")
    member.set_defaults(func=cmd_member)
    revoke = sub.add_parser("revoke", help="revoke the grants and consents of a user, a client, or both")
    revoke.add_argument("--user", help="a username")
    revoke.add_argument("--client", help="a client id")
    revoke.set_defaults(func=cmd_revoke)
    keys = sub.add_parser("keys", help="token-signing keys of the built-in authorization server")
    keys.add_argument("action", choices=["rotate", "list"])
    keys.add_argument("--activate-in", type=int, default=300, help="seconds until the new key signs (default 300)")
    keys.set_defaults(func=cmd_keys)
    client = sub.add_parser("client", help="OAuth clients of the built-in authorization server")
    client.add_argument("action", choices=["add", "list", "remove"])
    client.add_argument("client_id", nargs="?")
    client.add_argument("--name", help="with add: the name shown on the consent page")
    client.add_argument("--redirect-uri", action="append", help="with add: repeat for several")
    client.add_argument("--confidential", action="store_true", help="with add: issue a client secret")
    client.set_defaults(func=cmd_client)
    cursor_key = sub.add_parser("cursor-key", help="rotate the key that signs pagination cursors")
    cursor_key.add_argument("action", choices=["rotate"])
    cursor_key.set_defaults(func=cmd_cursor_key)
    usage = sub.add_parser("usage", help="tool calls per tenant, tool and day")
    usage.add_argument("--tenant")
    usage.add_argument("--days", type=int, default=7)
    usage.set_defaults(func=cmd_usage)
    reindex = sub.add_parser("reindex", help="re-embed every text with the configured embedding model")
    reindex.add_argument("--tenant", action="append", help="only this tenant (repeat for several)")
    reindex.add_argument("--max-texts", type=int, help="stop after embedding this many texts (resume later)")
    reindex.set_defaults(func=cmd_reindex)
    purge = sub.add_parser("purge", help="erase a tenant's entities for good (first shows what would go)")
    purge.add_argument("--tenant", required=True)
    purge.add_argument("--match", action="append", required=True, help="an entity's id, name or alias (repeat)")
    purge.add_argument("--episodes", choices=["keep", "remove"], default="keep", help="episodes that mention them")
    purge.add_argument("--confirm", type=int, help="the number of entities the first run showed: erase them")
    purge.set_defaults(func=cmd_purge)
    _transfer_commands(sub)
    _backup_commands(sub)
    args = parser.parse_args(argv)
    moving = args.command == "tenant" and args.action == "move"
    if args.command == "tenant" and args.action != "list" and not args.tenant and not (moving and args.status):
        parser.error("tenant: give the tenant id")
    if moving and not (args.status or args.finish or args.abort or args.cell):
        parser.error("tenant move: give the cell to move the tenant to")
    if args.command == "tenant" and args.cell and not moving:
        parser.error(f"tenant {args.action}: takes no cell")
    if args.command == "cell" and args.action not in ("list", "cleanup") and not args.name:
        parser.error("cell: give the cell's name")
    if args.command == "apikey" and args.action == "create" and not args.tenant:
        parser.error("apikey create: --tenant is required")
    if args.command == "user" and args.action != "list" and not args.username:
        parser.error("user: give the username")
    if args.command == "revoke" and not (args.user or args.client):
        parser.error("revoke: give --user, --client or both")
    if args.command == "client" and args.action != "list" and not args.client_id:
        parser.error("client: give the client id")
    if args.command == "client" and args.action == "add" and not args.redirect_uri:
        parser.error("client add: --redirect-uri is required")
    if args.command == "apikey" and args.action == "revoke" and not args.key_id:
        parser.error("apikey revoke: give the key id")
    args.func(args)


if __name__ == "__main__":
    main()
