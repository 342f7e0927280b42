"""The entity page's merge and aliases: propose duplicates of one entity (find_duplicates, or a name
typed), confirm, fold them into it (merge_entities); give or take its aliases. All through the
same services and input bounds as the tools."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from app.auth.principal import WRITE
from app.console.calls import parse
from app.console.memory import change, entity_id
from app.errors import EngramError
from app.services import models

if TYPE_CHECKING:
    from app.console.kit import Kit, Visit
    from app.services import Services

DUPLICATE_PAGES = 5  # find_duplicates pages read for one entity's candidates (each looks at 100 entities)
CANDIDATES = 10  # candidates proposed on the merge page


class AliasForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    alias: models.Name


class MergeForm(BaseModel):
    """The confirmed merge: the duplicate (id or name) and the survivor's version the person saw."""

    model_config = ConfigDict(extra="ignore")

    merge: models.Ref
    version: int | None = Field(None, ge=1, le=2**31 - 1)
    allow_type_mismatch: bool = False


class MergePages:
    def __init__(self, kit: Kit, services: Services) -> None:
        self.c = kit
        self.services = services

    def actions(self) -> dict[str, Any]:
        """Posted to /console/entity/{id}/<name>, beside the entity page's own forms."""
        return {"aliases/add": self.add_alias, "aliases/remove": self.remove_alias, "merge": self.merge}

    async def _change(self, request: Request, visit: Visit) -> tuple[str, dict[str, str]]:
        return await change(self.c, request, visit)

    async def add_alias(self, request: Request, visit: Visit) -> Response:
        eid, f = await self._change(request, visit)
        alias = parse(AliasForm, {"alias": f.get("alias", "")}).alias
        result = await self.c.run(visit.who, "add_aliases", self.services.merges.add_aliases, eid, [alias], writes=True)
        message = f"Alias {alias} added." if result.changed else f"{alias} was an alias already."
        return self.c.done(visit, f"/console/entity/{eid}", message)

    async def remove_alias(self, request: Request, visit: Visit) -> Response:
        eid, f = await self._change(request, visit)
        alias = parse(AliasForm, {"alias": f.get("alias", "")}).alias
        remove = self.services.merges.remove_aliases
        result = await self.c.run(visit.who, "remove_aliases", remove, eid, [alias], writes=True)
        message = f"Alias {alias} removed." if result.changed else f"{alias} was not an alias."
        return self.c.done(visit, f"/console/entity/{eid}", message)

    async def review(self, request: Request, visit: Visit) -> Response:
        """The merge page: candidates for this entity, or, with `other`, the confirmation of one."""
        visit.require(WRITE)
        eid = entity_id(request.path_params["id"])
        who, run, get = visit.who, self.c.run, self.services.entities.get
        entity = await run(who, "get_entity", get, eid, include_relations=False, max_observations=20, writes=False)
        if entity.id != eid:  # merged away: review at the survivor
            return self.c.done(visit, f"/console/entity/{entity.id}/merge", "That entity was merged into this one.")
        given = request.query_params.get("other", "")
        other = None
        if given:
            ref = parse(MergeForm, {"merge": given}).merge
            other = await run(who, "get_entity", get, ref, include_relations=False, max_observations=20, writes=False)
            if other.id == entity.id:
                raise EngramError("invalid", "an entity cannot be merged into itself")
        candidates = [] if other else await self.candidates(visit, entity)
        context = {"entity": entity, "other": other, "candidates": candidates, "given": given}
        return self.c.page(request, "merge.html", context, visit)

    async def candidates(self, visit: Visit, entity: models.Entity) -> list[tuple[models.EntitySummary, float]]:
        """The pairs find_duplicates proposes that hold this entity, best first, as (the other one, score)."""
        found: dict[str, tuple[models.EntitySummary, float]] = {}
        cursor: str | None = None
        limit = self.services.limits.max_results
        for _ in range(DUPLICATE_PAGES):
            page = await self.c.run(
                visit.who, "find_duplicates", self.services.duplicates.find, None, limit, cursor, writes=False
            )
            for pair in page.pairs:
                if entity.id in (pair.a.id, pair.b.id):
                    other = pair.b if pair.a.id == entity.id else pair.a
                    if other.id not in found or found[other.id][1] < pair.score:
                        found[other.id] = (other, pair.score)
            cursor = page.next_cursor
            if cursor is None:
                break
        return sorted(found.values(), key=lambda c: -c[1])[:CANDIDATES]

    async def merge(self, request: Request, visit: Visit) -> Response:
        eid, f = await self._change(request, visit)
        form = parse(
            MergeForm,
            {
                "merge": f.get("merge", ""),
                "version": f.get("version") or None,
                "allow_type_mismatch": f.get("allow_type_mismatch") == "yes",
            },
        )
        result = await self.c.run(
            visit.who, "merge_entities", self.services.merges.merge, eid, [form.merge],
            allow_type_mismatch=form.allow_type_mismatch, expected_version=form.version, writes=True,
        )  # fmt: skip
        merged = ", ".join(m.name for m in result.merged)
        note = f"Merged {merged} into this entity."
        if result.aliases_added:
            note += " Aliases gained: " + ", ".join(result.aliases_added) + "."
        if result.aliases_not_kept:
            note += " Not kept as aliases (another entity holds them): " + ", ".join(result.aliases_not_kept) + "."
        return self.c.done(visit, f"/console/entity/{eid}", note)
