"""Tenant administration (admin role): usage figures, members and their roles, API keys (made with
the secret shown once, and revoked), the audit log, export and import. Export and import run
through app/admin_routes.py's functions, the audit log through the `audit_log` tool's service, API
keys through definer functions bound to the session's tenant; members are the authorization
server's memberships of the session's tenant — never of a tenant a form names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response

from app.admin_routes import export_response, run_import
from app.auth.principal import ADMIN, READ, WRITE
from app.console.calls import parse
from app.errors import EngramError
from app.services import models
from app.services.transfer import Format
from app.services.writer import OnExisting

if TYPE_CHECKING:
    from app.authserver.accounts import Accounts
    from app.console.kit import Kit, Visit
    from app.services.api_keys import ApiKeys
    from app.services.audit import Audit
    from app.services.graph import Graph
    from app.services.transfer import Transfer

AUDIT_PAGE = 50
Username = models.Name


class AuditForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tool: models.TypeName | None = None
    subject: models.Ref | None = None
    cursor: models.Cursor | None = None


class MemberForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    username: Username
    role: str = Field("reader", pattern="^(reader|writer|admin)$")
    op: str = Field("set", pattern="^(set|remove)$")


class RevokeForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    key_id: models.ApiKeyId
    confirm: bool = False


class ExportForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format: Format = "engram"
    include_deleted: bool = False
    history: bool = False


class ImportForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format: Format | None = None
    on_existing: OnExisting = "merge"
    dry_run: bool = False


class AdminPages:
    def __init__(
        self,
        kit: Kit,
        accounts: Accounts,
        audit: Audit,
        api_keys: ApiKeys,
        graph: Graph,
        transfer: Transfer,
        *,
        max_bytes: int,
        seconds: float,
    ) -> None:
        self.c = kit
        self.accounts, self.graph, self.transfer = accounts, graph, transfer
        self.audit_log, self.api_keys = audit, api_keys
        self.max_bytes = max_bytes  # of a file to import
        self.seconds = seconds  # an export or import may take

    def actions(self) -> dict[str, Any]:
        return {
            "members": self.members,
            "keys/create": self.create_key,
            "keys/revoke": self.revoke_key,
            "export": self.export,
            "import": self.import_,
        }

    async def overview(self, request: Request, visit: Visit) -> Response:
        visit.require(ADMIN)
        stats = await self.c.run(visit.who, "graph_stats", self.graph.stats, writes=False)
        members = await self.accounts.members(visit.who.tenant)
        keys = await self.c.run(visit.who, "api_keys", self.api_keys.keys, writes=False)
        grantable = [s for s in (READ, WRITE, ADMIN) if s in visit.who.scopes]  # never more than one's own
        context = {
            "stats": stats,
            "members": members,
            "keys": keys,
            "grantable": grantable,
            "max_bytes": self.max_bytes,
        }
        return self.c.page(request, "admin.html", context, visit)

    async def audit(self, request: Request, visit: Visit) -> Response:
        visit.require(ADMIN)
        q = request.query_params
        form = parse(AuditForm, {k: v for k in ("tool", "subject", "cursor") if (v := q.get(k))})
        audit = self.audit_log.page
        page = await self.c.run(
            visit.who, "audit_log", audit, form.tool, AUDIT_PAGE, form.cursor, subject=form.subject, writes=False
        )
        return self.c.page(request, "audit.html", {"form": form, "page": page}, visit)

    async def members(self, request: Request, visit: Visit) -> Response:
        visit.require(ADMIN)
        form = parse(MemberForm, await self.c.form(request, visit))
        tenant, by = visit.who.tenant, visit.who.subject
        accounts = self.accounts
        if form.username.lower() == visit.session.username.lower():
            raise EngramError("invalid", "you cannot change your own membership here (ask another admin)")
        if form.op == "remove":
            await accounts.remove_member(tenant, form.username, by)
            return self.c.done(visit, "/console/admin", f"{form.username} is no longer a member.")
        await accounts.set_member(tenant, form.username, form.role, by)
        return self.c.done(visit, "/console/admin", f"{form.username} is now {form.role}.")

    async def create_key(self, request: Request, visit: Visit) -> Response:
        """A new key; its secret is on this answer only (a POST's answer, never cached, not kept)."""
        visit.require(ADMIN)
        fields = await self.c.form(request, visit)
        scopes = (await request.form()).getlist("scope")  # the form parsed once above; checkboxes repeat
        days = fields.get("expires_days", "").strip()
        new = parse(models.NewApiKey, {"name": fields.get("name", ""), "scopes": scopes, "expires_days": days or None})
        made = await self.c.run(visit.who, "create_api_key", self.api_keys.create, new, writes=True)
        response = self.c.page(request, "key_created.html", {"made": made}, visit)
        response.headers["Cache-Control"] = "no-store"
        response.headers["Pragma"] = "no-cache"
        return response

    async def revoke_key(self, request: Request, visit: Visit) -> Response:
        """Revoke after a confirmation page: the first post asks, the second (confirm=true) revokes."""
        visit.require(ADMIN)
        fields = await self.c.form(request, visit)
        form = parse(RevokeForm, {k: v for k, v in fields.items() if v})  # an empty `confirm` asks
        if not form.confirm:
            keys = await self.c.run(visit.who, "api_keys", self.api_keys.keys, writes=False)
            key = next((k for k in keys if k.id == form.key_id and k.revoked_at is None), None)
            if key is None:
                raise EngramError("not_found", f"this tenant has no unrevoked API key {form.key_id}")
            return self.c.page(request, "key_revoke.html", {"key": key}, visit)
        revoke = self.api_keys.revoke
        await self.c.run(visit.who, "revoke_api_key", revoke, form.key_id, writes=True)
        return self.c.done(visit, "/console/admin", f"API key {form.key_id} revoked.")

    async def export(self, request: Request, visit: Visit) -> Response:
        visit.require(ADMIN)
        fields = await self.c.form(request, visit)
        form = parse(ExportForm, fields)
        return await export_response(
            self.transfer,
            visit.who,
            form.format,
            deleted=form.include_deleted,
            history=form.history,
            seconds=self.seconds,
        )

    async def import_(self, request: Request, visit: Visit) -> Response:
        visit.require(ADMIN)
        form_data = await request.form(max_files=1, max_fields=10, max_part_size=self.max_bytes)
        fields = {k: v for k, v in form_data.items() if isinstance(v, str)}
        self.c.check_csrf(visit, fields)
        form = parse(ImportForm, fields)
        upload = form_data.get("file")
        if not isinstance(upload, UploadFile):
            raise EngramError("invalid", "file: choose a file to import")
        data = await upload.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            raise EngramError("limit", f"at most {self.max_bytes} bytes here; import larger files with `engram import`")
        summary = await run_import(
            self.transfer,
            visit.who,
            data,
            form.format,
            on_existing=form.on_existing,
            dry_run=form.dry_run,
            seconds=self.seconds,
        )
        return self.c.page(request, "imported.html", {"summary": summary, "dry_run": form.dry_run}, visit)
