"""The walk and bidirectional shortest-path logic of app/services/graph.py over a graph held in
memory: the store's one query per level (`traversal.expand`) is answered from an edge list, so
these check the search itself (visited sets, distances, meeting in the middle, path rebuilding,
bounds) in milliseconds. The same functions run against PostgreSQL in test_graph_tools.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from app.auth.keys import metadata_urls
from app.services import graph
from app.store import traversal
from app.store.traversal import Step

Edges = list[tuple[str, str]]  # (source, target)


@pytest.fixture
def edges(monkeypatch: pytest.MonkeyPatch) -> Edges:
    """The graph the walks read: append (source, target) pairs."""
    held: Edges = []

    async def expand(
        tx: Any, frontier: Sequence[str], *, outgoing: bool, incoming: bool, types: Any, limit: int, when: Any = None
    ) -> list[Step]:
        steps = []
        for source, target in held:
            if outgoing and source in frontier:
                steps.append(Step(source, target, source, target, {}))
            if incoming and target in frontier:
                steps.append(Step(target, source, source, target, {}))
        return steps[:limit]

    monkeypatch.setattr(traversal, "expand", expand)
    return held


async def _shortest(start: str, end: str, depth: int = 6, direction: str = "both", bounds: Any = None) -> Any:
    return await graph.shortest(None, start, end, depth, direction, None, bounds or graph.Bounds())  # type: ignore[arg-type]


async def test_a_chain_is_found_whole_and_in_order(edges: Edges) -> None:
    edges += [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]
    path, cut = await _shortest("a", "e")
    assert graph.path_nodes("a", path) == ["a", "b", "c", "d", "e"] and not cut
    back, _ = await _shortest("e", "a")  # against the edges' direction: "both" walks them either way
    assert graph.path_nodes("e", back) == ["e", "d", "c", "b", "a"]


async def test_the_shortest_of_several_paths_wins(edges: Edges) -> None:
    edges += [("a", "x1"), ("x1", "x2"), ("x2", "x3"), ("x3", "z"), ("a", "y"), ("y", "z")]
    path, _ = await _shortest("a", "z")
    assert graph.path_nodes("a", path) == ["a", "y", "z"]


async def test_direction_is_respected(edges: Edges) -> None:
    edges += [("a", "b"), ("c", "b")]  # a → b ← c
    assert (await _shortest("a", "c", direction="out"))[0] is None
    assert (await _shortest("a", "b", direction="in"))[0] is None
    assert graph.path_nodes("a", (await _shortest("a", "c", direction="both"))[0]) == ["a", "b", "c"]


async def test_max_depth_bounds_the_path(edges: Edges) -> None:
    edges += [("a", "b"), ("b", "c"), ("c", "d")]
    assert (await _shortest("a", "d", depth=2))[0] is None
    assert len((await _shortest("a", "d", depth=3))[0]) == 3


async def test_the_same_entity_is_a_path_of_no_steps(edges: Edges) -> None:
    assert await _shortest("a", "a") == ([], False)


async def test_a_level_over_its_bound_says_the_search_was_cut(edges: Edges) -> None:
    edges += [("hub", f"leaf{i}") for i in range(10)] + [("leaf9", "end")]
    path, cut = await _shortest("hub", "end", bounds=graph.Bounds(level_edges=3, frontier=100))
    assert cut  # a path may exist beyond what was read
    path, cut = await _shortest("hub", "end", bounds=graph.Bounds(level_edges=100, frontier=100))
    assert graph.path_nodes("hub", path) == ["hub", "leaf9", "end"] and not cut


async def test_a_walk_reaches_each_node_once_at_its_shortest_distance(edges: Edges) -> None:
    edges += [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e"), ("e", "a")]
    reached, cut = await graph.walk(None, ["a"], 3, "out", None, 100, graph.Bounds())  # type: ignore[arg-type]
    assert {r.gid: r.depth for r in reached} == {"b": 1, "c": 1, "d": 2, "e": 3} and not cut


async def test_a_walk_stops_at_its_limit_and_its_frontier_bound(edges: Edges) -> None:
    edges += [("a", f"n{i}") for i in range(20)] + [(f"n{i}", f"m{i}") for i in range(20)]
    reached, _ = await graph.walk(None, ["a"], 2, "out", None, 5, graph.Bounds())  # type: ignore[arg-type]
    assert len(reached) == 5
    reached, cut = await graph.walk(None, ["a"], 2, "out", None, 100, graph.Bounds(frontier=4))  # type: ignore[arg-type]
    assert cut and sum(r.depth == 2 for r in reached) == 4


def test_metadata_urls_cover_both_discovery_documents_with_the_issuers_path() -> None:
    assert metadata_urls("https://id.example.com") == [
        "https://id.example.com/.well-known/openid-configuration",
        "https://id.example.com/.well-known/oauth-authorization-server",
        "https://id.example.com/.well-known/openid-configuration",
    ]
    assert metadata_urls("https://id.example.com/realms/acme/") == [
        "https://id.example.com/realms/acme/.well-known/openid-configuration",
        "https://id.example.com/.well-known/oauth-authorization-server/realms/acme",
        "https://id.example.com/.well-known/openid-configuration/realms/acme",
    ]
