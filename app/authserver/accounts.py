"""Signing people in: local accounts (argon2id, throttled), browser sessions, and the tenants a
signed-in user may grant access to."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.auth.principal import personal_tenant
from app.authserver.credentials import check_password, digest, hash_password, new_secret, password_rule
from app.authserver.events import Events
from app.authserver.limits import RateLimiter
from app.errors import Code, EngramError
from app.store import accounts, oauth
from app.store.accounts import Membership, User

__all__ = ["Accounts", "Member", "Membership", "PasswordChanged", "SignInRefused", "Throttle", "User"]
from app.store.database import Database

DEV_USER = "dev"
DEV_TENANT = "demo"
MAX_PASSWORD_FIELD = 1024  # characters of any password field a form posts (a new one: MAX_PASSWORD)


@dataclass(frozen=True, slots=True)
class Member:
    """One member of a tenant, as its administrators see it."""

    username: str
    role: str


class SignInRefused(Exception):
    def __init__(self, reason: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Throttle:
    """At most `failures` wrong passwords per username per `window` seconds, and `attempts` sign-in
    posts per client address per minute."""

    failures: int = 5
    window: int = 900
    attempts: int = 30


@dataclass(frozen=True, slots=True)
class PasswordChanged:
    """What a password change ended besides the session it was made in."""

    sessions_ended: int
    grants_revoked: int


def _failures(username: str) -> str:
    """The limiter bucket of an account's wrong passwords: sign-in and password changes share it."""
    return f"sign-in-failed:{username}"


def user_key(value: str) -> str | None:
    """A user id (a token's `sub`) in its canonical form; None for what no user id can be."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


class Accounts:
    def __init__(
        self,
        db: Database,
        limiter: RateLimiter,
        events: Events,
        *,
        issuer: str,
        session_ttl: timedelta,
        throttle: Throttle,
        personal_tenants: bool,
    ) -> None:
        self._db = db
        self._limiter = limiter
        self._events = events
        self._issuer = issuer
        self._session_ttl = session_ttl
        self._throttle = throttle
        self._personal_tenants = personal_tenants

    async def sign_in(self, username: str, password: str, address: str) -> User:
        """The user, if the password is right and neither the account nor the address is throttled."""
        username = username.strip().lower()
        t = self._throttle
        if (wait := await self._limiter.hit(f"sign-in:{address}", t.attempts, 60)) is not None:
            await self._events("sign_in", "rate_limited")
            raise SignInRefused("rate_limited", "Too many sign-in attempts from here. Try again shortly.", wait)
        if (wait := await self._limiter.over(_failures(username), t.failures, t.window)) is not None:
            await self._events("sign_in", "throttled", detail=username)
            raise SignInRefused("throttled", "Too many failed attempts for this account. Try again later.", wait)
        user = await self._db.run(accounts.by_username, username)
        # An unknown name is checked against a dummy hash: both answers take as long.
        if not await check_password(user.password_hash if user else None, password) or user is None:
            await self._limiter.hit(_failures(username), t.failures, t.window)
            await self._events("sign_in", "wrong_password", user_id=user.id if user else None, detail=username)
            raise SignInRefused("wrong_password", "Wrong username or password.")
        if user.disabled:
            await self._events("sign_in", "disabled", user_id=user.id)
            raise SignInRefused("disabled", "This account is disabled.")
        await self._events("sign_in", "ok", user_id=user.id)
        return user

    async def user(self, user_id: str) -> User | None:
        """The user with this id (a verified token's `sub`), if there is one."""
        user = user_key(user_id)
        return await self._db.run(accounts.by_id, user) if user else None

    async def change_password(
        self, user_id: str, current: str, new: str, repeat: str, *, keep_session: str | None, keep_grant: str
    ) -> PasswordChanged:
        """The person's own password change, `user_id` from their verified token. The current password
        is checked as at sign-in, against the same per-account failure throttle (a wrong one counts;
        once throttled, nothing is checked). Then every other browser session of theirs ends and every
        other grant is revoked: all but `keep_session` (this browser's sign-in cookie) and `keep_grant`
        (the `sid` of the token the change came with), so a stolen password no longer keeps doors open.
        Every outcome is a `password_change` event; a refusal changes nothing."""
        user = await self.user(user_id)
        if user is None or user.disabled:
            raise EngramError("not_found", "no such account")
        who = user.id

        async def refuse(code: Code, why: str, message: str) -> EngramError:
            await self._events("password_change", "refused", user_id=who, detail=why)
            return EngramError(code, message)

        if user.password_hash is None:
            raise await refuse("invalid", "no_password", "this account signs in through an external provider")
        for name, value in (("current", current), ("new", new), ("repeat", repeat)):
            if len(value) > MAX_PASSWORD_FIELD or "\x00" in value:
                raise await refuse("invalid", "bounds", f"{name}: at most {MAX_PASSWORD_FIELD} characters, no NUL")
        if new != repeat:
            raise await refuse("invalid", "mismatch", "the new password and its repetition differ")
        if (problem := password_rule(new)) is not None:
            raise await refuse("invalid", "rule", problem)
        if new == current:
            raise await refuse("invalid", "unchanged", "the new password is the current one")
        t = self._throttle
        if await self._limiter.over(_failures(user.username), t.failures, t.window) is not None:
            raise await refuse("limit", "throttled", "too many wrong passwords for this account; try again later")
        if not await check_password(user.password_hash, current):
            await self._limiter.hit(_failures(user.username), t.failures, t.window)
            raise await refuse("forbidden", "wrong_password", "the current password is wrong")
        keep = digest(keep_session) if keep_session and len(keep_session) <= 100 else None
        done = await self._db.run(
            accounts.change_password, user.id, user.password_hash, await hash_password(new), keep, user_key(keep_grant)
        )
        if done is None:  # changed, or disabled, since it was read
            raise await refuse("conflict", "raced", "the account changed meanwhile; reload the page and try again")
        await self._events("password_change", "ok", user_id=user.id, detail=f"{done[0]} sessions, {done[1]} grants")
        return PasswordChanged(*done)

    async def linked_user(self, provider: str, subject: str) -> User | None:
        return await self._db.run(accounts.by_identity, provider, subject)

    async def link_new_user(self, username: str, display_name: str, provider: str, subject: str) -> User:
        return await self._db.run(accounts.create_linked, username, display_name, provider, subject)

    async def open_session(self, user: User) -> str:
        """A new browser session; the value goes in the cookie, only its hash is stored."""
        value, id_hash = new_secret()
        await self._db.run(accounts.open_session, id_hash, user.id, self._session_ttl)
        return value

    async def session_user(self, value: str | None) -> User | None:
        if not value or len(value) > 100:
            return None
        return await self._db.run(accounts.session_user, digest(value))

    async def close_session(self, value: str) -> None:
        await self._db.run(accounts.close_session, digest(value))

    async def tenants(self, user: User) -> list[Membership]:
        """The user's memberships; a user with none gets a personal tenant when tenants are automatic."""
        found = await self._db.run(accounts.memberships, user.id)
        if found or not self._personal_tenants:
            return found
        await self._db.run(accounts.add_membership, user.id, personal_tenant(self._issuer, user.id), "admin")
        return await self._db.run(accounts.memberships, user.id)

    async def dev_user(self) -> User:
        """The development user, signed in automatically on loopback: admin of the `demo` tenant."""
        user = await self._db.run(accounts.by_username, DEV_USER)
        if user is None:
            try:
                user = await self._db.run(accounts.create, DEV_USER, "Development user", None)
            except EngramError:  # another request created it first
                user = await self._db.run(accounts.by_username, DEV_USER)
                assert user is not None
            await self._db.run(accounts.add_membership, user.id, DEV_TENANT, "admin")
        return user

    # --- a tenant's members, for its administrators (the console) -----------------------------

    async def members(self, tenant: str) -> list[Member]:
        """The tenant's members, by username."""
        return [Member(name, role) for name, _, role in await self._db.run(accounts.list_memberships, tenant)]

    async def set_member(self, tenant: str, username: str, role: str, by: str) -> None:
        """Make `username` a member of `tenant` with `role` (added, or its role changed); recorded as an event."""
        if role not in accounts.ROLES:
            raise EngramError("invalid", "role: one of " + ", ".join(accounts.ROLES))
        user = await self._db.run(accounts.by_username, username.strip().lower())
        if user is None:
            raise EngramError("not_found", "no user with this username")
        await self._db.run(accounts.add_membership, user.id, tenant, role)
        await self._events("membership", "set", user_id=user.id, tenant=tenant, detail=f"{role} by {by}")

    async def remove_member(self, tenant: str, username: str, by: str) -> None:
        await self._db.run(accounts.remove_membership, username, tenant)
        await self._events("membership", "removed", tenant=tenant, detail=f"{username} by {by}")

    # --- operators (`engram user`, `engram member`, `engram revoke`) ---------------------------

    async def add_user(self, username: str, display_name: str, password_hash: str) -> User:
        """A local account; its username is kept in lower case."""
        user = await self._db.run(accounts.create, username.strip().lower(), display_name, password_hash)
        await self._events("account", "created", user_id=user.id, detail="by an operator")
        return user

    async def users(self) -> list[tuple[User, datetime]]:
        """Every account, with when it was made."""
        return await self._db.run(accounts.list_users)

    async def memberships(self, tenant: str | None) -> list[tuple[str, str, str]]:
        """(username, tenant, role) of one tenant's members, or of every tenant's."""
        return await self._db.run(accounts.list_memberships, tenant)

    async def set_password(self, username: str, password_hash: str, *, sign_out: bool) -> None:
        """An operator's reset; with `sign_out`, whoever knew the old password is out (the person too)."""
        user = await self._known(username)
        await self._db.run(accounts.set_password, user.username, password_hash)
        if sign_out:
            await self._sign_out_everywhere(user)
        await self._events("account", "password_set", user_id=user.id, detail="by an operator")

    async def set_disabled(self, username: str, disabled: bool) -> None:
        """Disable (and sign out everywhere at once) or enable an account."""
        user = await self._known(username)
        await self._db.run(accounts.set_disabled, user.username, disabled)
        if disabled:
            await self._sign_out_everywhere(user)
        await self._events("account", "disabled" if disabled else "enabled", user_id=user.id, detail="by an operator")

    async def revoke(self, username: str | None, client_id: str | None) -> int:
        """Everything a user, a client, or a user through one client holds: grants (with their
        refresh and access tokens) and remembered consents. Returns the grants revoked."""
        user_id = (await self._known(username)).id if username else None
        await self._db.run(oauth.forget_consents, user_id=user_id, client_id=client_id)
        count = await self._db.run(oauth.revoke_families, user_id=user_id, client_id=client_id)
        await self._events(
            "revoke", "ok", user_id=user_id, client_id=client_id, detail=f"{count} grants by an operator"
        )
        return count

    async def _known(self, username: str) -> User:
        user = await self._db.run(accounts.by_username, username.strip().lower())
        if user is None:
            raise EngramError("not_found", f"no user {username.strip().lower()!r}")
        return user

    async def _sign_out_everywhere(self, user: User) -> None:
        """Ends the user's sign-in sessions at once, and revokes their grants (so their tokens, within seconds)."""
        await self._db.run(accounts.close_sessions_of, user.id)
        await self._db.run(oauth.revoke_families, user_id=user.id)
