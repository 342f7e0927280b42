"""What a ranked or listed text must pass, and its one SQL text each.

- `FactFilter`: from these sources, written in [since, until) — a fact's own record (an observation's
  source and write time, an episode's source and `at`, a relation's properties). `listings.find`,
  the search rankings and recall's all render it through `FactFilter.sql`, so the condition is
  written once.
- `Scope`: a search's or a recall's filters: the entity's kind (types, area, topic, certainty), the
  fact filter and the moment. Search ranks the texts of entities (`entity_texts`), recall every
  fact one by one (`facts`); a fact has no area, topic or certainty of its own, so recall narrows
  by types, the fact filter and the moment only.

Every value is a bind parameter, numbered from the `first` a caller gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from app.store.validity import NOW, When, edge_holds, holds, valid_at


@dataclass(frozen=True, slots=True)
class FactSql:
    """`FactFilter`'s SQL over its three parameters $first..$first+2 (sources, since, until)."""

    first: int

    @property
    def unset(self) -> str:
        """No fact filter is given."""
        sources, since, until = (f"${self.first + i}" for i in range(3))
        return f"({sources}::text[] IS NULL AND {since}::timestamptz IS NULL AND {until}::timestamptz IS NULL)"

    def passes(self, source: str, written: str) -> str:
        """A record whose source is `source` and time `written` (SQL expressions) passes."""
        sources, since, until = (f"${self.first + i}" for i in range(3))
        return (
            f"({sources}::text[] IS NULL OR {source} = ANY({sources}::text[]))"
            f" AND ({since}::timestamptz IS NULL OR {written} >= {since}::timestamptz)"
            f" AND ({until}::timestamptz IS NULL OR {written} < {until}::timestamptz)"
        )


@dataclass(frozen=True, slots=True)
class FactFilter:
    """From these sources, written in [since, until); None: any."""

    sources: Sequence[str] | None = None
    since: datetime | None = None
    until: datetime | None = None

    @property
    def given(self) -> bool:
        """Only facts with a record of their own can pass (an entity's name or description cannot)."""
        return bool(self.sources) or self.since is not None or self.until is not None

    def sql(self, first: int) -> tuple[FactSql, list[Any]]:
        """The filter's SQL from parameter $first, and its parameters."""
        return FactSql(first), [list(self.sources) if self.sources else None, self.since, self.until]


ANY_FACT = FactFilter()


@dataclass(frozen=True, slots=True)
class Scope:
    """What every ranked text must pass (types, area and topic case-insensitively); None: anything.
    The moment (`when`) applies to the facts: those that do not hold then are not ranked."""

    types: Sequence[str] | None = None
    area: str | None = None
    topic: str | None = None
    min_certainty: int | None = None
    max_certainty: int | None = None
    facts: FactFilter = field(default_factory=FactFilter)
    when: When = NOW


Among = Literal["entity texts", "facts"]


def among(what: Among, scope: Scope, first: int) -> tuple[str, str, list[Any]]:
    """The JOIN and the condition (from parameter $first) that a search document `d` passes, and their
    parameters: as the text of an entity (search: relations are not such texts) or as a fact (recall)."""
    if what == "entity texts":
        sql, params = entity_text(scope, first)
        return "JOIN {s}.entities e ON e.id = d.entity_id", "AND d.relation_id IS NULL " + sql, params
    sql, params = fact(scope, first)
    return "", sql, params


def entity_kind(scope: Scope, first: int) -> tuple[str, list[Any]]:
    """SQL: the entity `e` is live and of the scope's kind (parameters $first..$first+4)."""
    types, area, topic, least, most = (f"${first + i}" for i in range(5))
    sql = f"""
    AND e.deleted_at IS NULL
    AND ({types}::text[] IS NULL OR lower(e.type) = ANY (SELECT lower(t) FROM unnest({types}::text[]) AS t))
    AND ({area}::text IS NULL OR lower(e.area) = lower({area}::text))
    AND ({topic}::text IS NULL OR lower(e.topic) = lower({topic}::text))
    AND ({least}::int IS NULL OR e.certainty >= {least}::int)
    AND ({most}::int IS NULL OR e.certainty <= {most}::int)
    """
    types_param = list(scope.types) if scope.types else None
    return sql, [types_param, scope.area, scope.topic, scope.min_certainty, scope.max_certainty]


def entity_text(scope: Scope, first: int) -> tuple[str, list[Any]]:
    """SQL: the document `d` of the entity `e` passes the scope. Its entity is live and of the kind;
    an observation counts only while it holds at the moment (unless every fact counts); with a fact
    filter only observations passing it match (the entity's own text has no source). The validity
    test anti-joins the few observations that have an interval (a partial index holds them)."""
    kind, kind_params = entity_kind(scope, first)
    facts, fact_params = scope.facts.sql(first + 5)
    at, everything = f"${first + 8}", f"${first + 9}"
    sql = f"""{kind}
    AND (CASE WHEN d.observation_id IS NULL THEN {facts.unset}
              ELSE ({everything}::boolean OR NOT EXISTS (
                        SELECT 1 FROM {{s}}.observations o WHERE o.id = d.observation_id
                          AND (o.valid_from IS NOT NULL OR o.valid_until IS NOT NULL)
                          AND NOT ({valid_at("o", at)})))
                   AND ({facts.unset} OR EXISTS (SELECT 1 FROM {{s}}.observations o WHERE o.id = d.observation_id
                                                  AND {facts.passes("o.source", "o.created_at")}))
         END)
    """
    return sql, [*kind_params, *fact_params, *scope.when.params()]


def relation_property(name: str) -> str:
    """SQL: the relation `r`'s property `name`, as text."""
    return f"ag_catalog.agtype_access_operator(VARIADIC ARRAY[r.properties, '\"{name}\"'::ag_catalog.agtype])::text"


def fact(scope: Scope, first: int) -> tuple[str, list[Any]]:
    """SQL: the document `d` is a live fact passing the scope (types, the fact filter, the moment),
    each kind by its own record: an observation or a description while its entity is live, a
    relation while both ends are, an episode by itself."""
    types = f"${first}"
    facts, fact_params = scope.facts.sql(first + 1)
    at, everything = f"${first + 4}", f"${first + 5}"
    typed = f"({types}::text[] IS NULL OR lower({{x}}.type) = ANY({types}::text[]))"
    sql = f"""
    AND CASE
        WHEN d.episode_id IS NOT NULL THEN EXISTS (
            SELECT 1 FROM {{s}}.episodes p WHERE p.id = d.episode_id AND {holds("p", at, everything)}
              AND {facts.passes("p.source", "p.at")}
              AND ({types}::text[] IS NULL OR EXISTS (
                    SELECT 1 FROM {{s}}.episode_entities pe JOIN {{s}}.entities x ON x.id = pe.entity_id
                    WHERE pe.episode_id = p.id AND x.deleted_at IS NULL AND {typed.format(x="x")})))
        WHEN d.relation_id IS NOT NULL THEN EXISTS (
            SELECT 1 FROM {{s}}.entities a, {{s}}.entities b
            WHERE a.id = d.entity_id AND b.id = d.other_id AND a.deleted_at IS NULL AND b.deleted_at IS NULL
              AND ({typed.format(x="a")} OR {typed.format(x="b")}))
            AND {edge_holds("d.edge", at, everything)}
            AND ({facts.unset} OR EXISTS (
                SELECT 1 FROM {{s}}."REL" r WHERE r.id = d.edge
                  AND {facts.passes(relation_property("source"), relation_property("created_at") + "::timestamptz")}))
        ELSE EXISTS (
            SELECT 1 FROM {{s}}.entities e WHERE e.id = d.entity_id AND e.deleted_at IS NULL AND {typed.format(x="e")}
              AND (d.observation_id IS NOT NULL OR e.description <> ''))
            AND CASE WHEN d.observation_id IS NULL THEN {facts.unset}
                ELSE EXISTS (SELECT 1 FROM {{s}}.observations o WHERE o.id = d.observation_id
                               AND {holds("o", at, everything)} AND {facts.passes("o.source", "o.created_at")})
                END
    END
    """
    types_param = [t.lower() for t in scope.types] if scope.types else None
    return sql, [types_param, *fact_params, *scope.when.params()]
