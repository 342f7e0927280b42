"""A tenant graph of realistic shape, made through the store's own bulk write paths, and reused.

Shape: entities of eight free-text types with categories, properties and a skewed number of
observations; relations of eight types whose ends follow a power law (a few hubs with thousands
of relations, most entities with a handful), no duplicates and no self-loops. Every row goes
through the functions the service uses (store.entities.insert / add_observations,
store.relations.insert, store.history.record), a few thousand per statement, so the tables,
AGE label tables, indexes and history look exactly as if users had written them.

The finished graph is recorded in the bench state directory; a later run reuses it when its
tenant still holds at least that many entities.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import asyncpg
import orjson

from app.config import Settings
from app.store import entities, history, relations
from app.store.database import Database
from app.store.history import Event
from bench.env import bench_dir

VERSION = 1
ACTOR = "bench-generator"

TYPES = {
    "person": 30,
    "concept": 20,
    "project": 12,
    "document": 12,
    "organization": 10,
    "place": 6,
    "event": 5,
    "tool": 5,
}
RELATION_TYPES = {
    "related to": 20,
    "knows": 15,
    "mentions": 15,
    "depends on": 12,
    "part of": 12,
    "works at": 10,
    "created": 10,
    "located in": 6,
}
AREAS = ["engineering", "research", "sales", "operations", "people", "finance", "product", "legal"]
_WORDS = (
    "amber basalt cedar delta ember fjord garnet harbor indigo juniper kestrel lumen meadow nimbus "
    "onyx prairie quartz raven sierra tundra umber vale willow xenon yarrow zephyr atlas beacon "
    "cobalt dune falcon glacier heron iris jade kelp lotus marble nova orchid pebble quill ridge "
    "saffron topaz aurora birch canyon drift echo fern grove haze isle jasper knoll lark mist north "
    "opal pine"
)
_VERBS = (
    "prefers uses leads reviewed approved drafted owns maintains suggested rejected measured asked "
    "mentioned scheduled migrated documented tested deployed funded visited"
)
WORDS, VERBS = _WORDS.split(), _VERBS.split()


@dataclass
class Shape:
    entities: int = 100_000
    relations: int = 500_000
    seed: int = 7
    # Ends of a relation: with this probability drawn from a power law over a fixed ranking
    # (so a few entities become hubs), otherwise uniformly.
    hub_share_target: float = 0.5
    hub_share_source: float = 0.2
    hub_exponent: float = 3.0  # index = N * u**exponent: the top entity draws ~N**(-1/exponent) of those picks


@dataclass
class Generated:
    tenant: str
    shape: Shape
    version: int = VERSION
    seconds: float = 0.0
    observations: int = 0
    degree: dict[str, Any] = field(default_factory=dict)  # max / p99 / p50 / mean total degree
    hubs: list[str] = field(default_factory=list)  # names of the most connected entities
    sample_names: list[str] = field(default_factory=list)


def _state_file(shape: Shape) -> Any:
    return bench_dir() / f"graph-{shape.entities}-{shape.relations}-s{shape.seed}-v{VERSION}.json"


async def ensure(settings: Settings, shape: Shape, say: Any = print, *, keep: bool = True) -> Generated:
    """The generated tenant for `shape`: reused when it exists intact, otherwise made now.

    With `keep` false (a scratch database), it is always made now and not recorded for later runs.
    """
    path = _state_file(shape)
    db = Database.from_settings(settings)
    await db.open()
    try:
        if keep and path.exists():
            known = orjson.loads(path.read_bytes())
            known["shape"] = Shape(**known["shape"])
            done = Generated(**known)
            tenant = await db.tenant(done.tenant)
            async with db.transaction(tenant, readonly=True) as tx:
                live = await entities.count_live(tx)
            if live >= shape.entities:
                say(f"reusing the generated graph in tenant {done.tenant}: removing earlier runs' writes ...")
                await analyze(settings, done.tenant, prune=True)
                return done
            say(f"the recorded tenant {done.tenant} holds {live:,} entities: generating anew")
        done = await _generate(db, shape, say)
    finally:
        await db.close()
    if keep:
        path.write_bytes(orjson.dumps({**asdict(done), "shape": asdict(shape)}, option=orjson.OPT_INDENT_2))
    await analyze(settings, done.tenant)
    return done


async def analyze(settings: Settings, tenant_key: str, *, prune: bool = False) -> None:
    """Fresh planner statistics for the tenant's tables, as their owner (the run-time role may not).

    With `prune`, first remove everything but the generator's own rows, so every run starts from
    the same graph: the benchmark's writes (entities, observations, relations, history, audit rows)
    would otherwise pile up from run to run.
    """
    db = Database.from_settings(settings)
    await db.open()
    try:
        tenant = await db.tenant(tenant_key)
    finally:
        await db.close()
    s = tenant.schema
    # AGE's operators (graphid =, agtype access) resolve through the search path.
    conn = await asyncpg.connect(settings.admin_dsn(), server_settings={"search_path": "ag_catalog, public"})
    try:
        if prune:
            async with conn.transaction():
                await conn.execute(
                    f"""DELETE FROM {s}."REL" WHERE ag_catalog.agtype_access_operator(VARIADIC ARRAY[properties,
                        '"created_by"'::ag_catalog.agtype])::text <> $1""",
                    ACTOR,
                )
                await conn.execute(
                    f"""WITH gone AS (DELETE FROM {s}.entities WHERE created_by <> $1 RETURNING gid)
                        DELETE FROM {s}."Entity" v USING gone WHERE v.id = gone.gid""",
                    ACTOR,
                )
                await conn.execute(f"DELETE FROM {s}.observations WHERE created_by <> $1", ACTOR)
                await conn.execute(f"DELETE FROM {s}.history WHERE actor <> $1", ACTOR)
                await conn.execute(f"DELETE FROM {s}.audit")
        for table in ("entities", "observations", "history", "search_docs", '"Entity"', '"REL"'):
            await conn.execute(f"VACUUM (ANALYZE) {s}.{table}" if prune else f"ANALYZE {s}.{table}")
    finally:
        await conn.close()


def _name(rng: random.Random, kind: str, i: int) -> str:
    return f"{kind.capitalize()} {rng.choice(WORDS).capitalize()} {rng.choice(WORDS).capitalize()} {i}"


def _observation(rng: random.Random, k: int) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12)))
    return f"{rng.choice(VERBS)} {words} (note {k})"


def _entity(rng: random.Random, i: int) -> entities.NewEntity:
    kind = rng.choices(list(TYPES), weights=list(TYPES.values()))[0]
    e = entities.NewEntity(id=str(uuid.uuid4()), name=_name(rng, kind, i), type=kind)
    if rng.random() < 0.5:
        e.description = f"A {kind} about {rng.choice(WORDS)} and {rng.choice(WORDS)}."
    if rng.random() < 0.6:
        e.area = rng.choice(AREAS)
        e.topic = f"{e.area}-{rng.randint(1, 5)}"
        if rng.random() < 0.5:
            e.subtopic = f"{e.topic}.{rng.randint(1, 4)}"
    if rng.random() < 0.5:
        e.certainty = rng.randint(40, 100)
    if rng.random() < 0.3:
        e.properties = {"source": rng.choice(WORDS), "rank": rng.randint(1, 1000)}
    return e


class _Ends:
    """Picks relation ends: mostly uniform, partly from a power law over a fixed random ranking."""

    def __init__(self, rng: random.Random, n: int, hub_share: float, exponent: float) -> None:
        self.rng, self.n, self.share, self.exponent = rng, n, hub_share, exponent
        self.ranking = list(range(n))
        rng.shuffle(self.ranking)

    def pick(self) -> int:
        if self.rng.random() < self.share:
            return self.ranking[min(self.n - 1, int(self.n * self.rng.random() ** self.exponent))]
        return self.rng.randrange(self.n)


async def _generate(db: Database, shape: Shape, say: Any) -> Generated:
    rng = random.Random(shape.seed)
    key = f"bench-{shape.entities // 1000}k-{uuid.uuid4().hex[:8]}"
    tenant = await db.tenant(key)
    started = time.monotonic()
    say(f"generating {shape.entities:,} entities and {shape.relations:,} relations in tenant {key} ...")

    ids: list[str] = []
    names: list[str] = []
    n_obs = 0
    batch = 2_000
    for lo in range(0, shape.entities, batch):
        items = [_entity(rng, i) for i in range(lo, min(lo + batch, shape.entities))]
        pairs = []
        for e in items:
            count = min(int(rng.expovariate(1 / 3)), 40)
            pairs += [entities.NewFact(e.id, _observation(rng, k)) for k in range(count)]
        async with db.transaction(tenant) as tx:
            await entities.insert(tx, items, ACTOR)
            added = await entities.add_observations(tx, pairs, ACTOR)
            events = [Event(e.id, "created", {"name": e.name, "type": e.type}) for e in items]
            events += [Event(eid, "observations_added", {"observations": t}) for eid, t in added.items()]
            await history.record(tx, events, ACTOR)
        ids += [e.id for e in items]
        names += [e.name for e in items]
        n_obs += len(pairs)
        if (lo // batch) % 10 == 9:
            say(f"  {len(ids):,} entities, {n_obs:,} observations ({time.monotonic() - started:.0f} s)")

    targets = _Ends(rng, shape.entities, shape.hub_share_target, shape.hub_exponent)
    sources = _Ends(rng, shape.entities, shape.hub_share_source, shape.hub_exponent)
    seen: set[tuple[int, int, str]] = set()
    degree: Counter[int] = Counter()
    made = 0
    batch = 5_000
    while made < shape.relations:
        keys: list[tuple[int, int, str]] = []
        while len(keys) < min(batch, shape.relations - made):
            a, b = sources.pick(), targets.pick()
            kind = rng.choices(list(RELATION_TYPES), weights=list(RELATION_TYPES.values()))[0]
            if a != b and (a, b, kind) not in seen:
                seen.add((a, b, kind))
                keys.append((a, b, kind))
        async with db.transaction(tenant) as tx:
            rows = await entities.by_ids(tx, list({ids[i] for k in keys for i in k[:2]}))
            new = [
                relations.NewRelation(
                    rows[ids[a]],
                    rows[ids[b]],
                    kind,
                    strength=round(rng.random(), 2) if rng.random() < 0.3 else None,
                    notes=f"seen in {rng.choice(WORDS)}" if rng.random() < 0.1 else None,
                )
                for a, b, kind in keys
            ]
            rel_ids = await relations.insert(tx, new, ACTOR)
            await history.record(
                tx,
                [
                    Event(ids[a], "related", {"type": kind, "from": names[a], "to": names[b]}, ids[b], rid)
                    for (a, b, kind), rid in zip(keys, rel_ids, strict=True)
                    if rid
                ],
                ACTOR,
            )
        for a, b, _ in keys:
            degree[a] += 1
            degree[b] += 1
        made += len(keys)
        if (made // batch) % 20 == 0:
            say(f"  {made:,} relations ({time.monotonic() - started:.0f} s)")

    by_degree = sorted((degree[i] for i in range(shape.entities)), reverse=True)
    done = Generated(
        tenant=key,
        shape=shape,
        seconds=round(time.monotonic() - started, 1),
        observations=n_obs,
        degree={
            "max": by_degree[0],
            "p99": by_degree[len(by_degree) // 100],
            "p50": by_degree[len(by_degree) // 2],
            "mean": round(math.fsum(by_degree) / len(by_degree), 2),
        },
        hubs=[names[i] for i, _ in degree.most_common(5)],
        sample_names=rng.sample(names, min(2_000, len(names))),
    )
    say(f"generated in {done.seconds:.0f} s; degree {done.degree}")
    return done
