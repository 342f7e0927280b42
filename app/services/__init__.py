"""The domain layer: what the tools call. One transaction per call, in the caller's tenant."""

from __future__ import annotations

from dataclasses import dataclass

from app.config import Settings
from app.services.api_keys import ApiKeys
from app.services.audit import Audit
from app.services.base import Limits
from app.services.cursors import Cursors
from app.services.duplicates import Duplicates
from app.services.entities import Entities
from app.services.episodes import Episodes
from app.services.fairness import Fairness
from app.services.graph import Graph
from app.services.graph_query import GraphQueries
from app.services.hook_models import HookPolicy
from app.services.hooks import DEFAULT_POLICY, Hooks, policy_from_settings
from app.services.indexing import Indexer
from app.services.live import Live
from app.services.merges import Merges
from app.services.pins import Pins
from app.services.purges import Purges
from app.services.ranking import CommonWords, Pager
from app.services.recall import Recall
from app.services.relations import Relations
from app.services.search import Search
from app.services.status import Status
from app.services.transfer import Transfer
from app.store.database import Database
from app.store.errors import DATABASE_ERRORS, RETRYABLE

# For the transport, which names no store module: database failures, and the races worth a retry.
__all__ = ["DATABASE_ERRORS", "RETRYABLE", "Limits", "Services"]


@dataclass(frozen=True)
class Services:
    entities: Entities
    relations: Relations
    graph: Graph
    status: Status
    search: Search
    recall: Recall
    episodes: Episodes
    transfer: Transfer
    merges: Merges
    pins: Pins
    duplicates: Duplicates
    queries: GraphQueries
    purges: Purges
    indexer: Indexer
    limits: Limits
    cursors: Cursors
    hooks: Hooks
    audit: Audit
    api_keys: ApiKeys
    fairness: Fairness | None = None
    live: Live | None = None  # subscriptions; None where nothing serves them (the CLI, benchmarks)

    @classmethod
    def create(
        cls,
        db: Database,
        indexer: Indexer,
        limits: Limits,
        *,
        ef_search: int = 100,
        cursor_max_age: float = 86400,
        fairness: Fairness | None = None,
        live: Live | None = None,
        hooks: HookPolicy | None = None,
        hook_cache_seconds: float = 30,
        hook_session_days: float = 30,
    ) -> Services:
        cursors = Cursors(cursor_max_age)
        shared = (db, indexer, cursors, limits, fairness)
        pager, common = Pager(cursors, limits), CommonWords()  # one cache of common words for both
        search = Search(*shared, pager=pager, common_words=common, ef_search=ef_search)
        recall = Recall(*shared, pager=pager, common_words=common, ef_search=ef_search)
        episodes = Episodes(*shared)
        return cls(
            entities=Entities(*shared),
            relations=Relations(*shared),
            graph=Graph(*shared),
            status=Status(*shared),
            search=search,
            recall=recall,
            episodes=episodes,
            transfer=Transfer(*shared),
            merges=Merges(*shared),
            pins=Pins(*shared),
            duplicates=Duplicates(*shared),
            queries=GraphQueries(*shared),
            purges=Purges(*shared),
            indexer=indexer,
            limits=limits,
            cursors=cursors,
            hooks=Hooks(
                recall,
                episodes,
                hooks or DEFAULT_POLICY,
                cache_seconds=hook_cache_seconds,
                session_days=hook_session_days,
            ),
            audit=Audit(*shared),
            api_keys=ApiKeys(*shared),
            fairness=fairness,
            live=live,
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, db: Database, indexer: Indexer, *, fairness: Fairness | None = None
    ) -> Services:
        """The services as the settings configure them: limits, vector search, cursor lifetime,
        subscriptions (whose feed the lifespan starts)."""
        return cls.create(
            db,
            indexer,
            Limits.from_settings(settings),
            ef_search=settings.search_ef_search,
            cursor_max_age=settings.cursor_max_age_seconds,
            fairness=fairness,
            live=Live.from_settings(settings, db),
            hooks=policy_from_settings(settings),
            hook_cache_seconds=settings.limits_cache_seconds,
            hook_session_days=settings.hook_session_days,
        )
