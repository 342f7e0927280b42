"""The benchmarks still run against the current code: `python -m bench --quick` and
`python -m bench.search --quick`, each in a scratch database of its own (never the suite's).

Quick runs check that every section ran and produced figures; nothing here looks at timings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.server import ROOT

# A quick run loads the embedding model in several processes and starts `engram serve` twice.
pytestmark = pytest.mark.timeout(900)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=840, check=False
    )


def _quick(module: str, results: Path) -> tuple[subprocess.CompletedProcess[str], Any]:
    """`python -m module --quick`, which must succeed, and the results it wrote."""
    done = _run(module, "--quick", "--results", str(results))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done, orjson.loads(results.read_bytes())


def test_benchmarks_run_quick(tmp_path: Path) -> None:
    done, r = _quick("bench", tmp_path / "results.json")
    assert r["machine"]["quick"] is True
    assert r["graph"]["shape"]["entities"] > 0
    assert len(r["store"]["cases"]) == 8 and r["store"]["writer"]["writes"] > 0
    assert {x["target"] for x in r["http"]["runs"]} == {
        "engram get_entity",
        "bare MCPServer trivial tool",
        "bare Starlette JSON handler",
    }
    # Without its npm package installed, a quick run skips the reference rather than download it.
    assert "sizes" in r["reference"] or "skipped" in r["reference"], r["reference"]
    assert "## Store level" in done.stdout and "## Over HTTP" in done.stdout


def test_soak_benchmark_runs_quick(tmp_path: Path) -> None:
    results = tmp_path / "soak.json"
    done = _run("bench.soak", "--quick", "--results", str(results))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    r = orjson.loads(results.read_bytes())["soak"]
    assert set(r["tools"]) == {"get_entity", "find_entities", "neighbors", "search"} | {
        "append_observations",
        "connect_entities",
        "upsert_entities",
    }
    assert r["errors"] == 0 and r["lost_writes"] == 0 and r["checked_writes"] > 0
    assert r["floor"]["calls"] > 0 and r["cores"]["server"] is not None and len(r["rss"]["series"]) > 2
    assert "## Soak" in done.stdout


def test_search_benchmark_runs_quick() -> None:
    done = _run("bench.search", "--quick")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "bench-large vector ranking: recall@10" in done.stdout


def test_transfer_benchmark_runs_quick(tmp_path: Path) -> None:
    done, r = _quick("bench.transfer", tmp_path / "transfer.json")
    assert r["machine"]["quick"] is True
    for fmt in ("engram", "memory"):
        f = r["transfer"]["formats"][fmt]
        assert f["round_trip_identical"] and f["import"]["rows_per_s"] > 0 and f["export"]["rows_per_s"] > 0
        assert f["summary"]["refused_total"] == 0
    assert "## Export and import" in done.stdout


def test_authorization_server_benchmark_runs_quick(tmp_path: Path) -> None:
    _, r = _quick("bench.auth", tmp_path / "auth.json")
    assert r["machine"]["quick"] is True
    assert all(r["steps"][step]["n"] > 0 for step in ("register", "sign in", "code exchange", "refresh", "revoke"))
    assert r["steps"]["refresh"]["n"] == r["rounds"] * r["refreshes_per_round"]
    assert set(r["floors"]) == {"argon2id verify (in process)", "ES256 sign (in process)", "bare Starlette POST (HTTP)"}


def test_recall_benchmark_runs_quick(tmp_path: Path) -> None:
    done, r = _quick("bench.recall", tmp_path / "recall.json")
    assert r["machine"]["quick"] is True
    systems = set(r["quality"])
    assert {"facts: engram recall", "facts: exact cosine", "facts: BM25", "facts: cosine+BM25 RRF"} <= systems
    assert all(by["all"]["n"] > 0 for by in r["quality"].values())
    if r["data"]["skipped"] is None:  # the development set beside the project: episodes measured too
        assert "episodes: engram recall" in systems
    assert r["latency"]["recall limit 10 (facts tenant)"]["n"] > 0 and r["latency"]["bare MCPServer trivial tool"]["n"]
    bulk = r["bulk episodes"]
    assert (
        bulk["episodes"] == 200
        and bulk["found_by_words_at_once"].split("/")[0] == bulk["found_by_words_at_once"].split("/")[1]
    )
    assert "## Recall" in done.stdout


READ_TOOLS = {
    "recall", "search", "get_entity", "find_entities", "entity_history", "neighbors", "shortest_path", "subgraph",
    "hierarchy", "graph_stats", "query_graph", "find_duplicates", "relation_chain", "list_episodes",
}  # fmt: skip


def test_context_benchmark_runs_quick(tmp_path: Path) -> None:
    done, r = _quick("bench.context", tmp_path / "context.json")
    assert r["machine"]["quick"] is True
    systems = set(r["evidence"])
    assert {"facts: engram recall", "facts: exact cosine as lines", "facts: BM25 as lines"} <= systems
    assert all(by["all"]["n"] > 0 and set(by["all"]) >= {"250", "500", "1000", "2000"} for by in r["evidence"].values())
    if r["data"]["skipped"] is None:
        assert "episodes: engram recall" in systems
    measured = {x["tool"] for x in r["sizes"] if "error" not in x}
    assert measured >= READ_TOOLS - ({"list_episodes"} if r["data"]["skipped"] else set())
    assert all(x["concise"] > 0 and x["full"] > 0 and x["before"] > 0 for x in r["sizes"] if "error" not in x)
    assert r["latency"]["bare MCPServer trivial tool"]["n"] > 0
    assert "## Context" in done.stdout


def test_scaling_benchmark_runs_quick(tmp_path: Path) -> None:
    _, r = _quick("bench.scaling", tmp_path / "scaling.json")
    assert r["machine"]["quick"] is True
    assert r["tenants"]["tenants"] == 10 and r["tenants"]["bytes_per_tenant"] > 0
    assert 0 < r["tenants"]["catalog_bytes_per_tenant"] < r["tenants"]["bytes_per_tenant"]
    assert r["tenants"]["backend"]["tenants_touched"] == 10
    assert set(r["rates"]) == {"take_tokens", "select_1"} and r["rates"]["take_tokens"]["n"] == 50
    pooler = r["pooler"]
    assert "skipped" in pooler or (pooler["summary"]["pgbouncer"]["errors"] == 0 and pooler["ratio"] > 0), pooler


def test_move_benchmark_runs_quick(tmp_path: Path) -> None:
    done, r = _quick("bench.move", tmp_path / "move.json")
    assert r["machine"]["quick"] is True
    assert r["move"]["switched"] and r["move"]["digests_equal"] and len(r["move"]["steps"]) == 11
    assert r["writes"]["acknowledged"] > 0 and r["writes"]["lost"] == 0 and r["writes"]["refused_count"] == 0
    assert r["tenant"]["relations"] == 600
    assert "## Moving a tenant" in done.stdout


def test_query_graph_memory_benchmark_runs_quick(tmp_path: Path) -> None:
    _, r = _quick("bench.query_memory", tmp_path / "query_memory.json")
    queries = r["query_memory"]["queries"]
    assert len(queries) == 3 and all("backend_growth_mib" in q for q in queries.values())
    assert queries["collect over a 100,000-row product"]["answer"].startswith("limit")


def test_hooks_benchmark_runs_quick(tmp_path: Path) -> None:
    done, r = _quick("bench.hooks", tmp_path / "hooks.json")
    assert r["machine"]["quick"] is True
    if r["data"]["skipped"] is None:  # the development set beside the project: the replay measured
        assert r["replay"]["prompts"] > 0 and r["replay"]["latency"]["n"] == r["replay"]["prompts"]
        evidence = r["evidence"][str(r["default_threshold"])]
        assert evidence["all"]["n"] > 0 and 0 <= evidence["all"]["hit"] <= 1
    assert r["large"]["latency"]["n"] > 0 and r["large"]["bulk"]["episodes"] == 200
    assert "## Hooks" in done.stdout


def test_redaction_benchmark_runs_quick(tmp_path: Path) -> None:
    done, r = _quick("bench.redaction", tmp_path / "redaction.json")
    assert r["machine"]["quick"] is True
    red = r["redaction"]
    assert red["recall"]["texts"] > 0 and "project docs paragraphs" in red["false_positives"]
    assert len(red["timing"]["cases"]) == 20 and red["event_loop"]["texts"] > 0
    assert "## Redaction" in done.stdout


def test_rerank_benchmark_runs_quick(tmp_path: Path) -> None:
    """On the recall benchmark's scratch database (the quick run above leaves it; made first when absent)."""
    _, r = _quick("bench.rerank", tmp_path / "rerank.json")
    assert r["machine"]["quick"] is True
    if "skipped" not in r:  # the development set beside the project
        assert set(r["runs"]) == {"no reranker", "reranker over 10"}
        assert all(by["latency"]["n"] == r["questions"] for run in r["runs"].values() for by in run.values())
