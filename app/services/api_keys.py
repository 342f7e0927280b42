"""A tenant's API keys, as its administrators see and change them from inside the tenant (the MCP
tools and the console); `engram apikey` makes them from outside (app/cli.py)."""

from __future__ import annotations

from app.auth import apikeys
from app.auth.principal import ADMIN, Principal
from app.errors import EngramError
from app.services import models
from app.services.audit_rows import fields
from app.services.base import Service
from app.store import tenants


class ApiKeys(Service):
    async def keys(self, who: Principal) -> list[models.ApiKey]:
        """The tenant's API keys (without their secrets), newest first."""
        async with self.tx(who, readonly=True, primary=True) as tx:
            rows = await tenants.keys_of_tenant(tx)
        return [models.ApiKey.model_validate(r, from_attributes=True) for r in rows]

    async def create(self, who: Principal, new: models.NewApiKey) -> models.CreatedApiKey:
        """A key for the caller's own tenant, made by one of its administrators, with at most the
        scopes they hold themselves. The secret is made and hashed as `engram apikey create` does
        (app/auth/apikeys.py) and only its hash is stored; the database function writes the audit row."""
        _require_admin(who)
        beyond = sorted(set(new.scopes) - who.scopes)
        if beyond:
            raise EngramError("forbidden", f"you cannot grant scopes you do not hold: {' '.join(beyond)}")
        key_id, key, digest = apikeys.generate()
        expires = apikeys.expiry(new.expires_days)
        async with self.tx(who) as tx:
            made = await tenants.create_key_in_tenant(
                tx, key_id, digest, new.name, new.scopes, expires, _key_audit(who, "create_api_key")
            )
        api_key = models.ApiKey(id=key_id, name=new.name, scopes=new.scopes, created_at=made, expires_at=expires)
        return models.CreatedApiKey(key=key, api_key=api_key)

    async def revoke(self, who: Principal, key_id: str) -> None:
        """Revoke one of the caller's tenant's keys (an administrator only); another tenant's id is not found."""
        _require_admin(who)
        async with self.tx(who) as tx:
            if not await tenants.revoke_key_in_tenant(tx, key_id, _key_audit(who, "revoke_api_key")):
                raise EngramError("not_found", f"this tenant has no unrevoked API key {key_id}")


def _require_admin(who: Principal) -> None:
    if ADMIN not in who.scopes:
        raise EngramError("forbidden", "API keys are made and revoked by the tenant's administrators")


def _key_audit(who: Principal, action: str) -> tenants.KeyAudit:
    """The audit row of a key change, which the database function writes with it."""
    row = fields(who, action)
    return tenants.KeyAudit(row.subject, row.client_id, row.tool, row.duration_ms, row.request_id)
