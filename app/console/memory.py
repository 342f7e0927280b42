"""The pages about a tenant's memory: find (search and listing), an entity and its edits, and the
neighbourhood graph with its JSON. Each reads and writes through the same services as the tools."""

from __future__ import annotations

import zlib
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.auth.principal import ADMIN, READ, WRITE
from app.console.calls import parse
from app.console.facts import EndForm, Facts, View, ViewForm, split, utc
from app.console.history import describe
from app.console.web import query, secure
from app.errors import EngramError, http_problem
from app.services import models
from app.services.filters import EntityFilters, Scope, moment, time_range
from app.services.search import Query
from app.services.search_models import Mode

if TYPE_CHECKING:
    from app.console.kit import Kit, Visit
    from app.services import Services

ENTITY_ID = TypeAdapter(models.Id)
RELATION_ID = TypeAdapter(models.Id)
LISTED = 50  # entities a listing page shows
HITS = 25  # search hits shown
RECENT = 20  # recently changed entities read to name the recent changes
HISTORY = 100  # history entries on an entity page
EPISODES = 10  # newest episodes on an entity page
GRAPH_NODES = 40  # a drawing larger than this is a hairball: the rest is counted as "N more"
GRAPH_EDGES = 200
TYPE_COLOURS = 10  # the palette of console.css's .type-0 … .type-9


def type_colour(entity_type: str) -> int:
    """The colour of an entity type, the same on every page and in every drawing: a stable hash of
    the type's name (types are free text, so no list of them can be coloured in advance)."""
    return zlib.crc32(entity_type.casefold().encode()) % TYPE_COLOURS


class FindForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    q: models.LongText | None = None
    type: models.TypeName | None = None
    area: models.Label | None = None
    topic: models.Label | None = None
    mode: Mode = "hybrid"
    after: date | None = None
    before: date | None = None
    source: models.Source | None = None
    since: date | None = None
    until: date | None = None


class GraphForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    entity: models.Id
    depth: int = Field(1, ge=1, le=3)
    type: models.TypeName | None = None


def _given(values: Any, *names: str) -> dict[str, str]:
    """The named parameters that were given, not blank: an optional field left empty is not given."""
    return {n: v for n in names if (v := values.get(n)) and v.strip()}


def entity_id(value: str) -> str:
    """An entity id from a URL; anything else is simply not found (ids are never guessed from names)."""
    try:
        return ENTITY_ID.validate_python(value)
    except ValidationError:
        raise EngramError("not_found", "no such entity") from None


async def change(kit: Kit, request: Request, visit: Visit) -> tuple[str, dict[str, str]]:
    """A write form's entity id and fields, once the role and the CSRF token allow it."""
    eid = entity_id(request.path_params["id"])
    visit.require(WRITE)
    return eid, await kit.form(request, visit)


class PurgeForm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    confirm: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    episodes: Literal["keep", "remove"] = "keep"


class MemoryPages:
    def __init__(self, kit: Kit, services: Services) -> None:
        self.c = kit
        self.services = services

    def actions(self) -> dict[str, Any]:
        """The entity page's forms, each posted to /console/entity/{id}/<name>."""
        return {
            "fields": self.edit_fields,
            "observations/add": self.add_observation,
            "observations/remove": self.remove_observation,
            "connect": self.connect,
            "disconnect": self.disconnect,
            "observations/end": self.end_observation,
            "relations/end": self.end_relation,
            "delete": self.delete,
            "restore": self.restore,
            "purge": self.purge,
        }

    # --- find ---------------------------------------------------------------------------------

    async def find(self, request: Request, visit: Visit) -> Response:
        visit.require(READ)
        who, run, find = visit.who, self.c.run, self.services.entities.find
        names = ("q", "type", "area", "topic", "mode", "after", "before", "source", "since", "until")
        form = parse(FindForm, _given(request.query_params, *names))
        facts = _facts(form)
        stats = await run(who, "graph_stats", self.services.graph.stats, writes=False)
        hits, listing, notices = None, None, []
        if form.q and form.q.strip():
            kinds = Scope(types=[form.type] if form.type else None, area=form.area, topic=form.topic, **facts)
            q = Query(text=form.q.strip(), mode=form.mode, scope=kinds, limit=HITS)
            result = await run(who, "search", self.services.search.search, q, writes=False)
            hits, notices = result.hits, list(result.notices)
            if form.after or form.before:
                notices.append("Search does not filter by time; the dates apply to the listing without a query.")
        else:
            listing = await run(who, "find_entities", find, _listing(form), "recent", LISTED, None, writes=False)
        shown = [h.entity for h in hits or []] + (listing.entities if listing else [])
        if hits is not None or _listing(form) != EntityFilters():  # name the recent changes: the latest changed
            latest = await run(who, "find_entities", find, EntityFilters(), "recent", RECENT, None, writes=False)
            shown += latest.entities
        named = {e.id: e.name for e in shown}
        context = {"form": form, "stats": stats, "hits": hits, "listing": listing, "notices": notices, "names": named}
        return self.c.page(request, "find.html", context, visit)

    # --- an entity ------------------------------------------------------------------------------

    async def entity(self, request: Request, visit: Visit) -> Response:
        """An entity as it is now (with its forms), as of another moment, or with its ended facts
        (`?as_of=…`, `?ended=1`: read-only, since every change acts on now)."""
        visit.require(READ)
        eid = entity_id(request.path_params["id"])
        form = parse(ViewForm, _given(request.query_params, "as_of", "ended"))
        when = moment(form.as_of, form.ended)  # both at once: refused before anything is read
        view = View(form.as_of, form.ended)
        who, run = visit.who, self.c.run
        # The history is readable for deleted entities too (by id), and names the tenant's own only.
        history = await run(who, "entity_history", self.services.entities.history, eid, HISTORY, None, writes=False)
        try:
            get = self.services.entities.get
            entity = await run(
                who, "get_entity", get, eid, include_relations=True, max_observations=1000, when=when, writes=False
            )
        except EngramError as exc:
            if exc.code != "not_found":
                raise
            entity = None  # deleted: its history and a way back
        if entity is not None and entity.id != eid:  # merged into another: its id leads to the survivor
            target = f"/console/entity/{entity.id}" + (f"?{view.query}" if view.query else "")
            return self.c.done(visit, target, f"{history.entity.name} was merged into this entity.")
        episodes = None
        if entity is not None:
            episodes = await run(
                who,
                "list_episodes",
                self.services.episodes.list,
                entity=entity.id,
                sources=None,
                since=None,
                until=None,
                as_of=form.as_of,
                include_invalid=form.ended,
                limit=EPISODES,
                cursor=None,
                writes=False,
            )
        facts = Facts()
        if entity is not None and view.ended:
            facts = split(entity, history.entries, datetime.now(UTC))
        elif entity is not None:
            facts = Facts(list(entity.observation_records), list(entity.relations or []))
        context = {
            "summary": history.entity,
            "entity": entity,
            "view": view,
            "facts": facts,
            "outgoing": [r for r in facts.relations if r.from_id == eid],
            "incoming": [r for r in facts.relations if r.to_id == eid and r.from_id != eid],
            "episodes": episodes.episodes if episodes else [],
            "more_episodes": bool(episodes and episodes.next_cursor),
            "history": [describe(e, who.subject) for e in history.entries],
            "more_history": history.next_cursor is not None,
            "utc": utc,
            "type_colour": type_colour,
        }
        return self.c.page(request, "entity.html", context, visit)

    async def _change(self, request: Request, visit: Visit) -> tuple[str, dict[str, str]]:
        return await change(self.c, request, visit)

    def _back(self, visit: Visit, eid: str, message: str) -> Response:
        return self.c.done(visit, f"/console/entity/{eid}", message)

    async def edit_fields(self, request: Request, visit: Visit) -> Response:
        eid, f = await self._change(request, visit)
        patch: dict[str, Any] = {"clear": []}
        for name in ("name", "type"):
            patch[name] = f.get(name, "")
        for name in ("description", "area", "topic", "subtopic", "certainty"):
            value = f.get(name, "")
            if value.strip():
                patch[name] = value
            else:
                patch["clear"].append(name)
        changes = parse(models.EntityPatch, patch)
        version = _version(f.get("version", ""))
        result = await self.c.run(
            visit.who, "update_entity", self.services.entities.update, eid, changes, version, writes=True
        )
        return self._back(visit, eid, "Saved." if result.changed else "Nothing to change.")

    async def add_observation(self, request: Request, visit: Visit) -> Response:
        return await self._observation(request, visit, add=True)

    async def remove_observation(self, request: Request, visit: Visit) -> Response:
        return await self._observation(request, visit, add=False)

    async def _observation(self, request: Request, visit: Visit, *, add: bool) -> Response:
        """Add a fact (optionally with its source and validity interval, as append_observations
        takes them) or remove one."""
        eid, f = await self._change(request, visit)
        fields = {"entity": eid, "observations": [f.get("observation", "")]}
        if add:
            item: models.ObservationsIn = parse(
                models.NewObservations, {**fields, **_given(f, "source", "valid_from", "valid_until")}
            )
        else:
            item = parse(models.ObservationsIn, fields)
        action = "append_observations" if add else "remove_observations"
        result = await self.c.run(
            visit.who, action, self.services.entities.change_observations, [item], add=add, writes=True
        )
        done = bool(result.results and result.results[0].observations)
        if add:
            return self._back(visit, eid, "Observation added." if done else "That observation was already there.")
        return self._back(visit, eid, "Observation removed." if done else "That observation was not there.")

    async def end_observation(self, request: Request, visit: Visit) -> Response:
        """End a fact (it held, and no longer does) now or at the moment given: reads from then on
        stop showing it, `as_of` reads of earlier moments still do, and history keeps why."""
        eid, f = await self._change(request, visit)
        item = parse(models.ObservationsIn, {"entity": eid, "observations": [f.get("observation", "")]})
        end = parse(EndForm, _given(f, "at", "reason"))
        invalidate = self.services.entities.invalidate_observations
        result = await self.c.run(
            visit.who, "invalidate_observations", invalidate, [item], end.at, end.reason, writes=True
        )
        if result.results and result.results[0].observations:
            return self._back(visit, eid, "Observation ended" + _at(end) + ".")
        return self._back(visit, eid, "That observation was not valid " + ("then." if end.at else "now."))

    async def end_relation(self, request: Request, visit: Visit) -> Response:
        eid, f = await self._change(request, visit)
        rid = _relation_id(f)
        end = parse(EndForm, _given(f, "at", "reason"))
        invalidate = self.services.relations.invalidate
        result = await self.c.run(
            visit.who, "invalidate_relations", invalidate, [], [rid], end.at, end.reason, writes=True
        )
        if not result.invalidated:
            raise EngramError("not_found", "no such relation valid " + ("at that moment" if end.at else "now"))
        return self._back(visit, eid, "Relation ended" + _at(end) + ".")

    async def connect(self, request: Request, visit: Visit) -> Response:
        eid, f = await self._change(request, visit)
        direction = f.get("direction", "out")
        if direction not in ("out", "in"):
            raise EngramError("invalid", "direction: from this entity (out) or to it (in)")
        other = f.get("other", "")
        ends = {"from": eid, "to": other} if direction == "out" else {"from": other, "to": eid}
        item = parse(models.RelationIn, {**ends, "type": f.get("type", "")})
        result = await self.c.run(visit.who, "connect", self.services.relations.connect, [item], writes=True)
        status = result.results[0].status
        return self._back(visit, eid, "Connected." if status == "created" else "That relation already existed.")

    async def disconnect(self, request: Request, visit: Visit) -> Response:
        eid, f = await self._change(request, visit)
        rid = _relation_id(f)
        result = await self.c.run(visit.who, "disconnect", self.services.relations.disconnect, [], [rid], writes=True)
        if not result.removed:
            raise EngramError("not_found", "no such relation")
        return self._back(visit, eid, "Disconnected.")

    async def delete(self, request: Request, visit: Visit) -> Response:
        eid, _ = await self._change(request, visit)
        await self.c.run(visit.who, "remove_entities", self.services.entities.set_deleted, [eid], True, writes=True)
        return self._back(visit, eid, "Deleted. It can be restored from this page.")

    async def restore(self, request: Request, visit: Visit) -> Response:
        eid, _ = await self._change(request, visit)
        await self.c.run(visit.who, "restore_entities", self.services.entities.set_deleted, [eid], False, writes=True)
        return self._back(visit, eid, "Restored.")

    async def purge(self, request: Request, visit: Visit) -> Response:
        """Erase for good (an administrator): posted without `confirm`, a page of what would go and
        a form to confirm it; with `confirm` (that number of entities), the purge."""
        eid = entity_id(request.path_params["id"])
        visit.require(ADMIN)
        f = await self.c.form(request, visit)
        form = parse(PurgeForm, {k: v for k, v in f.items() if k in ("confirm", "episodes") and v != ""})
        purge = self.services.purges.purge
        result = await self.c.run(
            visit.who, "purge_entities", purge, [eid], confirm=form.confirm, episodes=form.episodes, writes=True
        )
        if result.erased:
            return self.c.done(visit, "/console/find", result.summary)
        context = {"entity_id": eid, "result": result, "episodes": form.episodes}
        return self.c.page(request, "purge.html", context, visit)

    # --- the graph --------------------------------------------------------------------------------

    async def graph(self, request: Request, visit: Visit) -> Response:
        """The page: controls, the drawing (graph.js fills the SVG), and the same nodes as a list."""
        visit.require(READ)
        form = parse(GraphForm, _given(request.query_params, "entity", "depth", "type"))
        data = await self.neighbourhood(visit, form)
        source = f"/console/api/graph?{query(entity=form.entity, depth=form.depth, type=form.type)}"
        context = {"form": form, "data": data, "source": source}
        return self.c.page(request, "graph.html", context, visit)

    async def graph_data(self, request: Request, visit: Visit) -> Response:
        visit.require(READ)
        try:
            form = parse(GraphForm, _given(request.query_params, "entity", "depth", "type"))
            data = await self.neighbourhood(visit, form)
        except EngramError as exc:
            status, message = http_problem(exc)
            return secure(JSONResponse({"error": message}, status_code=status))
        return secure(JSONResponse(data))

    async def neighbourhood(self, visit: Visit, form: GraphForm) -> dict[str, Any]:
        """Up to GRAPH_NODES entities within `depth` of the centre and the relations among them; what a
        bound left out is counted (`more`, `more_plus` when even the count was bounded)."""
        who, run, graph = visit.who, self.c.run, self.services.graph
        sub = await run(
            who, "subgraph", graph.subgraph, [form.entity], depth=form.depth, max_nodes=GRAPH_NODES,
            max_relations=GRAPH_EDGES, writes=False,
        )  # fmt: skip
        more, more_plus = 0, False
        if sub.truncated:
            limit = self.services.limits.max_results
            near = await run(
                who, "neighbors", graph.neighbors, form.entity, depth=form.depth, direction="both", types=None,
                limit=limit, writes=False,
            )  # fmt: skip
            more, more_plus = max(len(near.neighbors) + 1 - len(sub.entities), 0), near.truncated
        nodes = [e for e in sub.entities if e.id == form.entity or form.type is None or e.type == form.type]
        kept = {n.id for n in nodes}
        edges = [r for r in sub.relations if r.from_id in kept and r.to_id in kept]
        return {
            "center": form.entity,
            "depth": form.depth,
            "nodes": [
                {
                    "id": n.id,
                    "name": n.name,
                    "type": n.type,
                    "colour": type_colour(n.type),
                    "url": f"/console/entity/{n.id}",
                }
                for n in nodes
            ],
            "edges": [{"id": r.id, "from": r.from_id, "to": r.to_id, "type": r.type} for r in edges],
            "hidden_by_type": len(sub.entities) - len(nodes),
            "more": more,
            "more_plus": more_plus,
        }


def _listing(form: FindForm) -> EntityFilters:
    """The listing's filters: a type, an area and topic, creation dates (`before` includes its whole
    day), and the facts'."""
    return EntityFilters(
        types=[form.type] if form.type else None,
        area=form.area,
        topic=form.topic,
        created_after=_day(form.after),
        created_before=_day(form.before + timedelta(days=1) if form.before else None),
        **_facts(form),
    )


def _facts(form: FindForm) -> dict[str, Any]:
    """The observation filters of search and listing alike: a source, and write dates (`until`
    includes its whole day)."""
    since, until = _day(form.since), _day(form.until + timedelta(days=1) if form.until else None)
    time_range(since, until)
    return {"sources": [form.source] if form.source else None, "since": since, "until": until}


def _at(end: EndForm) -> str:
    """How a notice names the end's moment: nothing for now."""
    return f" as of {utc(end.at)}" if end.at else ""


def _relation_id(fields: dict[str, str]) -> str:
    try:
        return RELATION_ID.validate_python(fields.get("relation", ""))
    except ValidationError:
        raise EngramError("invalid", "relation: a relation id") from None


def _day(value: date | None) -> datetime | None:
    return datetime.combine(value, time.min, tzinfo=UTC) if value else None


def _version(value: str) -> int | None:
    """The version the form was read at: a concurrent change makes the save a `conflict`."""
    if not value:
        return None
    if not value.isdigit() or not 1 <= int(value) <= 2**31 - 1:
        raise EngramError("invalid", "version: a positive number")
    return int(value)
