"""What the compatibility dialects tell a model when a graph answer is bounded.

Their originals return everything; Engram returns a bounded slice, and says so in a `note` the
model reads (and a `nextCursor` for read_graph) rather than letting it believe it saw it all.
"""

from __future__ import annotations

from app.services.graph import Slice


def note(graph: Slice, read_graph: str) -> str | None:
    """Why this answer is not everything, and how to get the rest; None when it is everything."""
    parts = []
    if graph.relations_more:
        parts.append(
            f"relations capped at {len(graph.relations)} per page; call {read_graph} with cursor=nextCursor for "
            "the rest of these entities' relations (the entities that follow come after them)"
        )
    elif graph.next_cursor:
        parts.append(
            f"page of {len(graph.entities)} of {graph.total_entities} entities (each with its outgoing "
            f"relations); call {read_graph} with cursor=nextCursor for the rest"
        )
    if graph.truncated:
        parts.append("result capped; narrow the query, or open fewer names at a time")
    cut = [x for x in graph.entities if x.observations_total > len(x.observations)]
    if cut:
        listed = ", ".join(f"{x.entity.name} (+{x.observations_total - len(x.observations)})" for x in cut[:5])
        more = f" and {len(cut) - 5} more" if len(cut) > 5 else ""
        parts.append(f"only the first {len(cut[0].observations)} observations of an entity are listed: {listed}{more}")
    return "; ".join(parts) or None


def truncated(graph: Slice) -> bool | None:
    """True when a bound cut the answer (not merely paged); None keeps the field out of it."""
    return True if graph.truncated or graph.relations_more else None
