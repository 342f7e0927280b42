"""Native tools for duplicates: merge them, name them with aliases, find them."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from functools import partial
from typing import Annotated

from pydantic import Field

from app.answers import merges as shown
from app.answers.form import Detail
from app.auth.principal import READ, WRITE, Principal
from app.mcp.tools.entities import EntityId, EntityName, one_ref
from app.mcp.toolset import ADDITIVE, DESTRUCTIVE, READ_ONLY, ToolSet
from app.services import Services, models
from app.services.merges import MAX_MERGED

Aliases = Annotated[list[models.Name], Field(min_length=1, max_length=50)]


def register(tool: ToolSet, services: Services) -> None:
    cap = services.limits.max_results

    @tool(WRITE, DESTRUCTIVE, title="Merge entities", answer=shown.merged)
    async def merge_entities(
        who: Principal,
        into: Annotated[models.Ref, Field(description="The survivor: id or name.")],
        merge: Annotated[
            list[models.Ref],
            Field(min_length=1, max_length=MAX_MERGED, description="The duplicates: ids or names."),
        ],
        properties_rule: Annotated[
            models.PropertiesRule,
            Field(description="Whose value wins on a key both have."),
        ] = "survivor",
        allow_type_mismatch: bool = False,
        expected_version: Annotated[int | None, Field(ge=1, le=2**31 - 1)] = None,
    ) -> models.MergeResult:
        """Fold duplicates into the survivor: their observations and relations move to it, names become
        aliases; no restore. Types must match unless `allow_type_mismatch`.
        """
        return await services.merges.merge(
            who,
            into,
            merge,
            properties_rule=properties_rule,
            allow_type_mismatch=allow_type_mismatch,
            expected_version=expected_version,
        )

    @tool(WRITE, ADDITIVE, title="Add aliases", one_of=("id", "name"), answer=partial(shown.aliases, added=True))
    async def add_aliases(
        who: Principal, aliases: Aliases, id: EntityId = None, name: EntityName = None
    ) -> models.AliasesResult:
        """Other names an entity answers to (abbreviations, former names) for every lookup by name. One
        another entity holds is a `conflict`.
        """
        return await services.merges.add_aliases(who, one_ref(id, name), aliases)

    @tool(WRITE, DESTRUCTIVE, title="Remove aliases", one_of=("id", "name"), answer=partial(shown.aliases, added=False))
    async def remove_aliases(
        who: Principal, aliases: Aliases, id: EntityId = None, name: EntityName = None
    ) -> models.AliasesResult:
        """Take aliases from an entity (a deleted one by id); those it lacks count as unchanged."""
        return await services.merges.remove_aliases(who, one_ref(id, name), aliases)

    @tool(READ, READ_ONLY, title="Find duplicates", answer=shown.duplicates)
    async def find_duplicates(
        who: Principal,
        types: Annotated[
            list[models.TypeName] | None, Field(max_length=20, description="Both of a pair of these types.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=cap)] = 20,
        cursor: models.Cursor | None = None,
        detail: Detail = "concise",
    ) -> models.DuplicatesPage:
        """Pairs that may be one entity (similar names or meaning, shared neighbours), best first, for
        merge_entities. Each call scans a slice: pass its cursor for the next.
        """
        return await services.duplicates.find(who, types, limit, cursor)
