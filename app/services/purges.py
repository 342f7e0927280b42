"""Forgetting for good: purge_entities (memory:admin), `engram purge` and the retention sweep erase
entities with everything said about them (app/store/purge.py). A first call answers what would be
erased; the purge runs only when `confirm` names that many entities. The audit log records that a
purge happened, by whom and how many rows, never what was erased (docs/security.md, "Forgetting")."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pydantic import BaseModel, Field

from app.auth.principal import ADMIN, Principal, principal_key
from app.errors import EngramError
from app.observability.context import CALL
from app.services import audit_rows
from app.services.base import Service
from app.store import episodes as episode_store
from app.store import purge
from app.store.cell import Cell, each_cell
from app.store.database import Tx
from app.store.purge import Episodes, Plan

logger = logging.getLogger(__name__)

SHOWN_NAMES = 20  # names a preview lists
SWEEP_BATCH = 500  # entities the retention sweep erases in one tenant at a time


class PurgeCounts(BaseModel):
    entities: int = Field(description="Entities, with those merged into them.")
    observations: int
    relations: int
    aliases: int
    history: int = Field(description="History rows: theirs, and others' about a relation with them or naming them.")
    search_documents: int
    embeddings: int
    episode_links: int
    episodes: int = Field(description="Episodes that mention them, by link or by name (with episodes='remove').")
    episodes_kept_mentioning: int = Field(
        description=f"Episodes kept (episodes='keep') whose text still names them (counted up to {purge.MENTIONS_MAX})."
    )


class PurgeResult(BaseModel):
    erased: bool = Field(description="False: a preview; nothing was erased.")
    names: list[str] = Field(description=f"A preview's entities (the first {SHOWN_NAMES}); empty once erased.")
    counts: PurgeCounts
    summary: str = Field(description="What was (or would be) erased, in one line.")


class PrivateErased(BaseModel):
    erased: bool = Field(description="False: a preview; nothing was erased.")
    episodes: int = Field(description="Episodes of that principal's private memory (with their search documents).")
    summary: str = Field(description="What was (or would be) erased, in one line.")


def _summary(counts: PurgeCounts, erased: bool, more: bool) -> str:
    """One line: what goes, what stays that still names them (and the option that erases it too)."""
    plus = "+" if more else ""  # more episodes name them than a preview reads
    parts = [
        f"{n}{plus if k == 'episodes' else ''} {k.replace('_', ' ')}"
        for k, n in counts.model_dump().items()
        if n and k not in ("entities", "episodes_kept_mentioning")
    ]
    what = f"{counts.entities} entities" + (f" with {', '.join(parts)}" if parts else "")
    kept = counts.episodes_kept_mentioning
    if kept:
        named = f"{kept}{plus} kept episode{'s' if kept > 1 or more else ''}"
        stays = f" {named} still name them{'' if erased else ' (episodes=remove erases those too)'}."
    else:
        stays = ""
    if erased:
        return f"Erased for good: {what}.{stays}"
    return f"Would erase {what}.{stays} Nothing was erased: call again with confirm={counts.entities}."


class Purges(Service):
    async def purge(
        self, who: Principal, refs: Sequence[str], *, confirm: int | None, episodes: Episodes = "keep"
    ) -> PurgeResult:
        """Erase the entities `refs` name (ids, names, aliases; deleted ones too) when `confirm`
        is their number; without it, answer what would be erased."""
        self.check_batch(len(refs))
        async with self.tx(who, everyone=True) as tx:  # private episodes naming them go too
            ids, unknown = await purge.matching(tx, list(dict.fromkeys(refs)))
            if unknown:
                raise EngramError("not_found", "no entities by these names or ids", refs=unknown[:SHOWN_NAMES])
            return await self._purge(tx, who, ids, confirm, episodes)

    async def erase_private(
        self, who: Principal, subject: str, issuer: str | None, *, confirm: int | None
    ) -> PrivateErased:
        """Erase one principal's private memory wholesale (its episodes, by the token subject and
        issuer — the caller's issuer if not given) when `confirm` is their number; without it, how
        many there are. An administrator's power over what it may not read: only counts come back."""
        owner = principal_key(who.issuer if issuer is None else issuer, subject)
        async with self.tx(who, everyone=True) as tx:
            held = await episode_store.private_count(tx, owner)
            if confirm is None:
                what = f"{held} episode{'s' if held != 1 else ''} of {subject}'s private memory"
                return PrivateErased(
                    erased=False, episodes=held, summary=f"Would erase {what}. Call again with confirm={held}."
                )
            if confirm != held:
                raise EngramError(
                    "conflict",
                    f"confirm names {confirm} episodes but {held} would be erased; call without confirm to count them",
                    episodes=held,
                )
            gone = await episode_store.erase_private(tx, owner)
            tx.affected = [f"private memory erased: {gone} episodes"]  # the audit row: never whose text
            if CALL.get() is None:
                await audit_rows.write(tx, audit_rows.fields(who, "erase_private"), tx.affected)
        self.indexer.forget(tx.tenant.id)
        return PrivateErased(
            erased=True, episodes=gone, summary=f"Erased for good: {gone} episodes of {subject}'s private memory."
        )

    async def sweep(self, days: float, per_tenant: int = SWEEP_BATCH) -> int:
        """Erase, in every tenant this database serves, the entities soft-deleted longer ago than the
        tenant's retention (its own, or `days`): at most `per_tenant` of them each time; their number."""

        async def past_retention(name: str, cell: Cell) -> list[str]:
            return await cell.pool.run(purge.past_retention, days)

        # A cell down is skipped (and logged): the others are still swept.
        keys = await each_cell(self.db.cells, past_retention, on_error="skip")
        erased = 0
        for key in (key for found in keys.values() for key in found):
            who = Principal(
                subject="retention", client_id="engram", tenant=key, scopes=frozenset({ADMIN}), issuer="", operator=True
            )
            try:
                erased += await self.purge_expired(who, days, per_tenant)
            except Exception as exc:  # one tenant's failure (moving, fenced) never starves the others
                logger.warning("retention sweep skipped tenant %s: %s", key, str(exc)[:200])
        return erased

    async def purge_expired(self, who: Principal, days: float, limit: int) -> int:
        """The retention sweep of one tenant: entities soft-deleted more than `days` ago, at most
        `limit` of them (with those merged into them), erased; their number."""
        async with self.tx(who, everyone=True) as tx:  # private episodes naming them go too
            ids = await purge.deleted_before(tx, days, limit)
            if not ids:
                return 0
            plan = await purge.plan(tx, ids)
            result = await self._purge(tx, who, ids, len(plan.targets), "keep", plan)
        return result.counts.entities

    async def _purge(
        self,
        tx: Tx,
        who: Principal,
        ids: list[str],
        confirm: int | None,
        episodes: Episodes,
        plan: Plan | None = None,
    ) -> PurgeResult:
        plan = plan or await purge.plan(tx, ids)
        counts = PurgeCounts(**await purge.counts(tx, plan, episodes))
        if confirm is None:
            return PurgeResult(
                erased=False,
                names=[t.name for t in plan.targets][:SHOWN_NAMES],
                counts=counts,
                summary=_summary(counts, False, plan.more_mentioning),
            )
        if confirm != counts.entities:
            raise EngramError(
                "conflict",
                f"confirm names {confirm} entities but {counts.entities} would be erased;"
                " call without confirm to see them",
                entities=counts.entities,
            )
        rows = await purge.erase(tx, plan, episodes)
        if episodes == "keep":  # kept episodes' search documents lose the erased speakers' names
            tx.episodes = plan.episodes
        # The audit row says a purge happened, by whom and how many rows: never the ids or names.
        tx.affected = [f"purge: {counts.entities} entities", f"{rows} rows"]
        tx.touched = plan.ids  # announced after the rows are gone: subscribers hear the graph changed, no names
        if CALL.get() is None:  # the operator's command or the retention sweep: no tool call writes it
            await audit_rows.write(tx, audit_rows.fields(who, "purge"), tx.affected)
        self.indexer.forget(tx.tenant.id)
        return PurgeResult(erased=True, names=[], counts=counts, summary=_summary(counts, True, plan.more_mentioning))
