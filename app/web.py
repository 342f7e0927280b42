"""What every HTML page of the server shares, the console's and the sign-in pages' alike: the page
skeleton its templates extend, cookie names and flags, and the strict headers (a
Content-Security-Policy with no inline script or style, never framed, never sniffed, never cached,
no referrer)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from starlette.responses import JSONResponse, Response

# The page every template extends (templates/page.html): head, stylesheet, no inline anything.
TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True, slots=True)
class Cookies:
    """`__Host-` names and Secure over https (plain http only on loopback); HttpOnly and SameSite=Lax always."""

    secure: bool

    def name(self, base: str) -> str:
        return f"__Host-{base}" if self.secure else base

    def set(self, response: Response, name: str, value: str, max_age: int | None = None) -> None:
        response.set_cookie(name, value, max_age=max_age, path="/", secure=self.secure, httponly=True, samesite="lax")

    def clear(self, response: Response, name: str) -> None:
        response.delete_cookie(name, path="/", secure=self.secure, httponly=True, samesite="lax")


def policy(*, scripts: bool = False, form_targets: Sequence[str] = ()) -> str:
    """Own stylesheets and images only; with `scripts`, own script files and fetches too; forms
    only to here (and to `form_targets`); never framed; no <base>."""
    own = (
        "script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'"
        if scripts
        else ("style-src 'self'; img-src 'self'")
    )
    targets = " ".join(["'self'", *form_targets])
    return f"default-src 'none'; {own}; form-action {targets}; frame-ancestors 'none'; base-uri 'none'"


def secure(response: Response, csp: str) -> Response:
    """The headers every page carries."""
    response.headers["Content-Security-Policy"] = csp
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def invalid_token(metadata_url: str, description: str) -> Response:
    """401 for a bearer credential refused at a JSON route (RFC 6750), pointing at the resource's
    metadata as the MCP endpoints' refusals do."""
    challenge = f'Bearer error="invalid_token", resource_metadata="{metadata_url}"'
    return JSONResponse(
        {"error": "invalid_token", "error_description": description},
        status_code=401,
        headers={"WWW-Authenticate": challenge},
    )
