"""What the auth mode (ENGRAM_AUTH_MODE) decides: whether the built-in authorization server runs,
and which issuer's tokens the verifier accepts (the server's own keys, or the identity provider's)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TypedDict

import httpx2

from app.auth.apikey_checks import ApiKeys
from app.auth.cimd import ClientDocuments
from app.auth.devkeys import load_or_create_key
from app.auth.keys import Issuer
from app.auth.verifier import Introspection, TokenVerifier
from app.authserver.accounts import Throttle
from app.authserver.provider import Lifetimes
from app.authserver.server import AuthServer, RateLimits
from app.config import Settings
from app.store import tenants
from app.store.database import Database


class _Common(TypedDict):
    """What every token verifier takes, whichever keys it checks against."""

    audiences: Sequence[str]
    scope_names: dict[str, str]
    api_keys: ApiKeys
    scope_claims: Sequence[str]
    cache_seconds: float


def authorization_server(settings: Settings, db: Database) -> AuthServer | None:
    """The built-in authorization server (builtin mode, and dev mode with its dev user signed in at once);
    None in oidc mode, where an identity provider issues the tokens."""
    if settings.auth_mode == "oidc":
        return None
    dev = settings.auth_mode == "dev"
    return AuthServer(
        db,
        issuer=settings.issuer,
        resources=list(settings.endpoint_urls.values()),
        scope_names=settings.scope_names,
        tenant_claim=settings.tenant_claim,
        lifetimes=Lifetimes(access=settings.access_token_ttl_seconds, refresh=settings.refresh_token_ttl_seconds),
        local_accounts=settings.local_accounts,
        auto_sign_in=dev,
        personal_tenants=settings.tenant_policy == "auto",
        registration=settings.client_registration,
        documents=ClientDocuments(allow_insecure_loopback=settings.client_metadata_allow_http_loopback)
        if settings.client_metadata_documents
        else None,
        throttle=Throttle(
            failures=settings.sign_in_max_failures,
            window=settings.sign_in_failure_window_seconds,
            attempts=settings.sign_in_per_minute,
        ),
        rate_limits=RateLimits(
            token=settings.token_per_minute,
            register=settings.register_per_minute,
            authorize=settings.authorize_per_minute,
        ),
        unused_client_days=settings.unused_client_days,
        upstream=settings.upstream_providers,
        key_reload_seconds=settings.signing_key_reload_seconds,
        # `engram token` signs with the dev key on disk; its tokens stay valid beside the server's own.
        extra_keys=[load_or_create_key(settings.dev_key_file)] if dev else (),
    )


def token_verifier(
    settings: Settings, db: Database, http: httpx2.AsyncClient, auth: AuthServer | None
) -> TokenVerifier:
    """The token verifier for the auth mode: the built-in server's keys and revoked grants when `auth`
    runs, else the identity provider's keys (fetched with `http`) and, given client credentials, its
    token introspection. API keys are accepted in every mode."""
    api_keys = ApiKeys(functools.partial(tenants.api_key, db), settings.tenant_claim, settings.api_key_cache_seconds)
    common = _Common(
        audiences=settings.audiences,
        scope_names=settings.scope_names,
        api_keys=api_keys,
        scope_claims=settings.scope_claims,
        cache_seconds=settings.verified_token_cache_seconds,
    )
    if auth is not None:
        return TokenVerifier(auth.keys, issuer=settings.issuer, revoked=auth.revocations, **common)
    issuer = Issuer(
        settings.issuer,
        http,
        jwks_url=settings.oidc_jwks_url,
        min_refresh=settings.jwks_min_refresh_seconds,
        max_age=settings.jwks_max_age_seconds,
    )
    introspection = None
    if settings.oidc_client_id and settings.oidc_client_secret:
        introspection = Introspection(
            issuer, http, settings.oidc_client_id, settings.oidc_client_secret.get_secret_value()
        )
    return TokenVerifier(issuer, issuer=settings.issuer, introspection=introspection, **common)
