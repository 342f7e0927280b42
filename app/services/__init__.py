"""The domain layer: what the tools call. One transaction per call, in the caller's tenant."""

from __future__ import annotations

from dataclasses import dataclass

from app.services.base import Limits
from app.services.cursors import Cursors
from app.services.entities import Entities
from app.services.graph import Graph
from app.services.relations import Relations
from app.services.status import Status
from app.store.database import Database


@dataclass(frozen=True)
class Services:
    entities: Entities
    relations: Relations
    graph: Graph
    status: Status
    limits: Limits
    cursors: Cursors

    @classmethod
    def create(cls, db: Database, limits: Limits) -> Services:
        cursors = Cursors()
        return cls(
            entities=Entities(db, cursors, limits),
            relations=Relations(db, cursors, limits),
            graph=Graph(db, cursors, limits),
            status=Status(db, cursors, limits),
            limits=limits,
            cursors=cursors,
        )
