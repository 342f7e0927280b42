"""Your account: the signed-in person's username and display name and, for a local account, changing
its password.

Like the connected applications this is about the person, not the session's tenant: the
authorization server's `Accounts` finds the user by the session's verified token (`sub`), and the
form names no user, so a forged post can only ever reach its sender's own account. The current
password is checked as at sign-in, throttle included. A change signs out other devices: every other
browser session at the authorization server ends and every other grant (other console sign-ins,
assistants' refresh tokens) is revoked; this browser's session and the console grant it is using
stay, so the person is not thrown out of the page they are on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from app.authserver.credentials import MAX_PASSWORD, MIN_PASSWORD
from app.errors import EngramError

if TYPE_CHECKING:
    from app.authserver.accounts import Accounts
    from app.console.kit import Kit, Visit

PATH = "/console/account"


class AccountPage:
    def __init__(self, kit: Kit, accounts: Accounts, sign_in_cookie: str) -> None:
        self.c = kit
        self.accounts = accounts
        self.sign_in_cookie = sign_in_cookie  # the authorization server's session: this browser's, kept

    async def show(self, request: Request, visit: Visit) -> Response:
        user = await self.accounts.user(visit.who.subject)
        if user is None:
            raise EngramError("not_found", "this session's account no longer exists")
        context = {"user": user, "min_password": MIN_PASSWORD, "max_password": MAX_PASSWORD}
        return self.c.page(request, "account.html", context, visit)

    async def change_password(self, request: Request, visit: Visit) -> Response:
        """The new password for the session's own account; other devices are signed out."""
        form = await self.c.form(request, visit)
        fields = [form.get(name, "") for name in ("current", "new", "repeat")]  # bounded by the service
        done = await self.accounts.change_password(
            visit.who.subject,
            *fields,
            keep_session=request.cookies.get(self.sign_in_cookie),
            keep_grant=visit.grant,
        )
        others = f"{done.sessions_ended} other browser sessions ended, {done.grants_revoked} other grants revoked"
        return self.c.done(visit, PATH, f"Password changed; {others}.")
