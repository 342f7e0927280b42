"""The domain rules of the knowledge graph: one transaction per call, results shaped for tools."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import asyncpg
import orjson

from app.auth.principal import Principal
from app.errors import EngramError
from app.services.indexing import Indexer
from app.services.models import (
    ConnectItem,
    ConnectResult,
    Direction,
    Entity,
    EntityIn,
    EntitySummary,
    Neighbor,
    NeighborsResult,
    Relation,
    RelationIn,
    UpsertItem,
    UpsertResult,
)
from app.store import graph, index
from app.store.database import Database


def _summary(row: asyncpg.Record) -> EntitySummary:
    return EntitySummary(
        id=row["id"],
        name=row["name"],
        type=row["type"],
        description=row["description"],
        area=row["area"],
        topic=row["topic"],
        subtopic=row["subtopic"],
        certainty=row["certainty"],
    )


def _relation(props: dict[str, Any], source: str, target: str) -> Relation:
    return Relation(
        id=props["id"],
        type=props["type"],
        from_=source,
        to=target,
        strength=props.get("strength"),
        notes=props.get("notes"),
        properties=props.get("properties"),
    )


def _merge_duplicates(items: Sequence[EntityIn]) -> list[graph.EntityInput]:
    """One input per name: later fields win, observations are concatenated without repeats."""
    merged: dict[str, graph.EntityInput] = {}
    for item in items:
        current = merged.get(item.name)
        if current is None:
            merged[item.name] = graph.EntityInput(
                name=item.name,
                type=item.type,
                description=item.description,
                area=item.area,
                topic=item.topic,
                subtopic=item.subtopic,
                certainty=item.certainty,
                properties=item.properties,
                observations=list(dict.fromkeys(item.observations)),
            )
            continue
        for attr in ("type", "description", "area", "topic", "subtopic", "certainty"):
            if (value := getattr(item, attr)) is not None:
                setattr(current, attr, value)
        if item.properties:
            current.properties = {**(current.properties or {}), **item.properties}
        current.observations = list(dict.fromkeys([*current.observations, *item.observations]))
    return list(merged.values())


class Memory:
    """Entities, relations and walks of the caller's tenant."""

    def __init__(self, db: Database, indexer: Indexer, *, max_batch: int, max_results: int) -> None:
        self._db = db
        self._indexer = indexer
        self.max_batch = max_batch
        self.max_results = max_results

    def _check_batch(self, size: int) -> None:
        if size > self.max_batch:
            raise EngramError("limit", f"at most {self.max_batch} items per call (got {size})")

    async def upsert_entities(self, who: Principal, items: Sequence[EntityIn], on_existing: str) -> UpsertResult:
        self._check_batch(len(items))
        tenant = await self._db.tenant(who.tenant)
        merged = _merge_duplicates(items)
        # search: embed before the transaction opens, so it stays short
        vectors = await self._indexer.vectors_for(
            tenant, [t for i in merged for t in index.texts_of(i.name, i.type, i.description, i.observations)]
        )
        async with self._db.transaction(tenant) as tx:
            done = await graph.upsert_entities(tx, merged, on_existing, who.actor)
            # search: documents of what changed, in the same transaction
            pending = await index.sync(tx, [d.id for d in done if d.status in ("created", "updated")], vectors)
        self._indexer.written(pending)  # search: wake the filler if texts wait for embeddings
        return UpsertResult(
            results=[UpsertItem.model_validate(dataclasses.asdict(d)) for d in done], embeddings_pending=pending
        )

    async def get_entity(
        self, who: Principal, ref: str, *, include_relations: bool, max_observations: int, max_relations: int
    ) -> Entity:
        tenant = await self._db.tenant(who.tenant)
        async with self._db.transaction(tenant, readonly=True) as tx:
            found = (await graph.resolve(tx, [ref]))[ref]
            row = await graph.entity(tx, found["id"])
            observations, total = (await graph.observations(tx, [row["id"]], max_observations))[row["id"]]
            relations = None
            truncated = False
            if include_relations:
                rows = await graph.relations_of(tx, row["id"], max_relations + 1)
                truncated = len(rows) > max_relations
                relations = [
                    _relation(
                        orjson.loads(r["rel"]),
                        *((row["name"], r["other_name"]) if r["dir"] == "out" else (r["other_name"], row["name"])),
                    )
                    for r in rows[:max_relations]
                ]
        return Entity(
            **_summary(row).model_dump(),
            properties=row["properties"],
            observations=observations,
            observations_total=total,
            version=row["version"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            created_by=row["created_by"],
            updated_by=row["updated_by"],
            relations=relations,
            relations_truncated=truncated,
        )

    async def connect_entities(self, who: Principal, items: Sequence[RelationIn]) -> ConnectResult:
        self._check_batch(len(items))
        tenant = await self._db.tenant(who.tenant)
        async with self._db.transaction(tenant) as tx:
            ends = await graph.resolve(tx, list(dict.fromkeys(r for i in items for r in (i.from_, i.to))))

            def key(i: RelationIn) -> tuple[str, str, str]:
                return ends[i.from_]["gid"], ends[i.to]["gid"], i.type

            batch = list({key(i): i for i in reversed(items)}.values())  # first occurrence of each (from, type, to)
            created = await graph.insert_relations(
                tx,
                [
                    graph.RelationInput(ends[i.from_], ends[i.to], i.type, i.strength, i.notes, i.properties)
                    for i in batch
                ],
                who.actor,
            )
            new = {key(i): c for i, c in zip(batch, created, strict=True) if c is not None}
            old = await graph.find_relations(tx, [key(i) for i in batch if key(i) not in new])
        results, seen = [], set()
        for i in items:
            k = key(i)
            created_now = k in new and k not in seen  # a repeat within the batch was not created twice
            seen.add(k)
            relation = _relation(new.get(k) or old[k], ends[i.from_]["name"], ends[i.to]["name"])
            results.append(ConnectItem(status="created" if created_now else "exists", relation=relation))
        return ConnectResult(results=results)

    async def neighbors(
        self,
        who: Principal,
        ref: str,
        *,
        depth: int,
        direction: Direction,
        relation_types: list[str] | None,
        limit: int,
    ) -> NeighborsResult:
        tenant = await self._db.tenant(who.tenant)
        async with self._db.transaction(tenant, readonly=True) as tx:
            start = (await graph.resolve(tx, [ref]))[ref]
            reached = await graph.walk(tx, start["gid"], depth, direction, relation_types, limit + 1)
            rows = await graph.entities_by_gid(
                tx,
                [start["gid"], *(r.gid for r in reached[:limit])]
                + [g for r in reached[:limit] for g in (r.source_gid, r.target_gid)],
            )
        names = {gid: row["name"] for gid, row in rows.items()}
        neighbors = [
            Neighbor(
                entity=_summary(rows[r.gid]),
                depth=r.depth,
                via=_relation(r.edge, names[r.source_gid], names[r.target_gid]),
            )
            for r in reached[:limit]
        ]
        return NeighborsResult(start=_summary(rows[start["gid"]]), neighbors=neighbors, truncated=len(reached) > limit)
