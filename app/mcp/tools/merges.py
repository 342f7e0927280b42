"""Native tools for duplicates: merge them, name them with aliases, find them."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

from pydantic import Field

from app.auth.principal import READ, WRITE, Principal
from app.mcp.tools.entities import EntityId, EntityName, one_ref
from app.mcp.toolset import ADDITIVE, DESTRUCTIVE, READ_ONLY, ToolSet
from app.services import Services, models
from app.services.merges import MAX_MERGED

Aliases = Annotated[
    list[models.Name], Field(min_length=1, max_length=50, description="Aliases, 1-200 characters each.")
]


def register(tool: ToolSet, services: Services) -> None:
    cap = services.limits.max_results

    @tool(WRITE, DESTRUCTIVE)
    async def merge_entities(
        who: Principal,
        into: Annotated[models.Ref, Field(description="The entity that survives: id or name.")],
        merge: Annotated[
            list[models.Ref],
            Field(min_length=1, max_length=MAX_MERGED, description="The duplicates folded into it: ids or names."),
        ],
        properties_rule: Annotated[
            models.PropertiesRule,
            Field(
                description="On a property key both have: `survivor` keeps the survivor's value, `merged` takes "
                "the merged entities' (the first given that has it)."
            ),
        ] = "survivor",
        allow_type_mismatch: bool = False,
        expected_version: Annotated[int | None, Field(ge=1, le=2**31 - 1)] = None,
    ) -> models.MergeResult:
        """Fold duplicate entities into one surviving entity, in one transaction.

        Their observations move to the survivor (after its own, exact duplicates skipped), their
        relations are re-pointed to it (a relation that becomes a copy of another is folded into it,
        one that would join the survivor to itself is dropped), their properties combine by
        `properties_rule`, and fields the survivor leaves empty take a merged entity's value. Their
        names and aliases become the survivor's aliases, so old names and old ids still find it;
        the merged entities then no longer exist apart (they cannot be restored). Types must match
        (ignoring case) unless `allow_type_mismatch`. `expected_version` checks the survivor's
        version. Use find_duplicates to find candidates.
        """
        return await services.merges.merge(
            who,
            into,
            merge,
            properties_rule=properties_rule,
            allow_type_mismatch=allow_type_mismatch,
            expected_version=expected_version,
        )

    @tool(WRITE, ADDITIVE)
    async def add_aliases(
        who: Principal, aliases: Aliases, id: EntityId = None, name: EntityName = None
    ) -> models.AliasesResult:
        """Give an entity (id or name) other names it answers to: abbreviations, former names, spellings.

        Every lookup by name (get_entity, connect_entities, append_observations, ...) and search
        then find it by an alias too. An alias must not already name another entity or be another
        entity's alias (ignoring case): that is a `conflict`, listing who holds it.
        """
        return await services.merges.add_aliases(who, one_ref(id, name), aliases)

    @tool(WRITE, DESTRUCTIVE)
    async def remove_aliases(
        who: Principal, aliases: Aliases, id: EntityId = None, name: EntityName = None
    ) -> models.AliasesResult:
        """Take aliases from an entity (id or name; a deleted entity by id). Matched ignoring case;
        aliases it does not hold are reported as unchanged."""
        return await services.merges.remove_aliases(who, one_ref(id, name), aliases)

    @tool(READ, READ_ONLY)
    async def find_duplicates(
        who: Principal,
        types: Annotated[
            list[models.TypeName] | None, Field(max_length=20, description="Both of a pair are of one of these types.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=cap, description="Pairs per page, at most.")] = 20,
        cursor: models.Cursor | None = None,
    ) -> models.DuplicatesPage:
        """Propose pairs of entities that may be duplicates, with reasons and a score (0-1), to review
        and then merge with merge_entities.

        Reasons: similar names (trigrams), similar meaning (embeddings of the entities' texts), and
        neighbours both are related to. Each call looks at the next slice of the memory (up to 100
        entities) and returns the pairs found there, best first: follow `next_cursor` (with the same
        `types`) until it is null to review everything; a page may be empty while more follow.
        """
        return await services.duplicates.find(who, types, limit, cursor)
