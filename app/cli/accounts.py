"""`engram user`, `member`, `revoke`, `keys` and `client`: the built-in authorization server's
accounts, memberships, grants, signing keys and clients. Accounts change through the account
service the console uses (its rules, its events); keys and clients through the operator service."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from app.cli.common import exiting, operator, read_settings, with_database

if TYPE_CHECKING:
    from app.authserver.accounts import Accounts
    from app.cli.common import Subparsers

T = TypeVar("T")

_OPERATOR_DEADLINE = 60.0  # seconds an operator's account command may take


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
    from app.cli.database import owner_pool

    settings = with_database(read_settings())

    async def run() -> T:
        async with owner_pool(settings, _OPERATOR_DEADLINE) as db:
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

    return exiting(run)


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

    ops = operator()
    if args.action == "rotate":
        activate = timedelta(seconds=args.activate_in)
        retire = timedelta(seconds=read_settings().access_token_ttl_seconds + 300)

        async def run() -> str:
            async with ops.owners.control() as control:
                return await rotate(control, activate_in=activate, retire_after=retire)

        kid = exiting(run)
        print(f"key {kid} signs from {args.activate_in} s from now; older keys verify for {retire} after that")
        return
    for key in exiting(ops.keys.signing_keys):
        retires = f"retires {key.retires_at:%Y-%m-%d %H:%M}" if key.retires_at else "current"
        print(f"{key.kid}\tactivates {key.activates_at:%Y-%m-%d %H:%M:%S}\t{retires}")


def cmd_client(args: argparse.Namespace) -> None:
    """OAuth clients: configured ones (`add`), and all registered ones."""
    from mcp.shared.auth import OAuthClientInformationFull

    from app.authserver.clients import check_metadata
    from app.authserver.credentials import new_secret

    keys = operator().keys
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
        exiting(lambda: keys.add_client(args.client_id, metadata, secret_hash))
        print(f"client {args.client_id} added" + (f"; its secret (shown once): {secret}" if secret else ""))
    elif args.action == "remove":
        _accounts(lambda a: a.revoke(None, args.client_id))
        if not exiting(lambda: keys.remove_client(args.client_id)):
            sys.exit(f"error: no client {args.client_id}")
        print(f"client {args.client_id} removed and its grants revoked")
    else:
        for client, created, used in exiting(keys.clients):
            name = client.metadata.get("client_name", "")
            print(f"{client.client_id}\t{client.kind}\t{name}\tcreated {created:%Y-%m-%d}\tused {used or 'never'}")


def _check_user(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.action != "list" and not args.username:
        parser.error("user: give the username")


def _check_revoke(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not (args.user or args.client):
        parser.error("revoke: give --user, --client or both")


def _check_client(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.action != "list" and not args.client_id:
        parser.error("client: give the client id")
    if args.action == "add" and not args.redirect_uri:
        parser.error("client add: --redirect-uri is required")


def add_user(sub: Subparsers) -> None:
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
    user.set_defaults(func=cmd_user, check=_check_user)


def add_member(sub: Subparsers) -> None:
    member = sub.add_parser("member", help="which tenants a user may give applications access to")
    member.add_argument("action", choices=["add", "remove", "list"])
    member.add_argument("username", nargs="?")
    member.add_argument("--tenant", help="the tenant id (required for add and remove)")
    member.add_argument("--role", choices=["reader", "writer", "admin"], default="writer")
    member.set_defaults(func=cmd_member)


def add_revoke(sub: Subparsers) -> None:
    revoke = sub.add_parser("revoke", help="revoke the grants and consents of a user, a client, or both")
    revoke.add_argument("--user", help="a username")
    revoke.add_argument("--client", help="a client id")
    revoke.set_defaults(func=cmd_revoke, check=_check_revoke)


def add_keys(sub: Subparsers) -> None:
    keys = sub.add_parser("keys", help="token-signing keys of the built-in authorization server")
    keys.add_argument("action", choices=["rotate", "list"])
    keys.add_argument("--activate-in", type=int, default=300, help="seconds until the new key signs (default 300)")
    keys.set_defaults(func=cmd_keys)


def add_client(sub: Subparsers) -> None:
    client = sub.add_parser("client", help="OAuth clients of the built-in authorization server")
    client.add_argument("action", choices=["add", "list", "remove"])
    client.add_argument("client_id", nargs="?")
    client.add_argument("--name", help="with add: the name shown on the consent page")
    client.add_argument("--redirect-uri", action="append", help="with add: repeat for several")
    client.add_argument("--confidential", action="store_true", help="with add: issue a client secret")
    client.set_defaults(func=cmd_client, check=_check_client)


COMMANDS = {"user": add_user, "member": add_member, "revoke": add_revoke, "keys": add_keys, "client": add_client}
