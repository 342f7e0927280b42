"""The Markdown tables of one run, as docs/benchmarks.md shows them."""

from __future__ import annotations

from typing import Any


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _target(case: dict[str, Any]) -> str:
    if not case.get("target"):
        return "-"
    kind, bound = case["target"]
    verdict = "met" if case.get("met") else "**missed**"
    return f"p50 ≤ {bound:g} ms: {verdict}" if kind == "p50_ms" else f"≥ {bound:,.0f}/s: {verdict}"


def machine(r: dict[str, Any]) -> str:
    m, v = r["machine"], r["versions"]
    load = ", ".join(f"{x:.2f}" for x in m["load_average"])
    after = ", ".join(f"{x:.2f}" for x in m.get("load_average_after", ()))
    pkgs = ", ".join(f"{k} {x}" for k, x in m["packages"].items())
    exts = ", ".join(f"{k} {x}" for k, x in v.items())
    return "\n".join(
        [
            f"- date: {m['date']}{' (quick run: not figures)' if m.get('quick') else ''}",
            f"- code: {m.get('code', 'unknown')}",
            f"- machine: {m['nproc']} cores ({m['cpu']}), {m['memory_gib']} GiB, Linux {m['kernel']}",
            f"- load average (1/5/15 min) before: {load}; after: {after}",
            f"- Python {m['python']} ({pkgs}); Node {m['node']}",
            f"- database: {exts}",
        ]
    )


def graph(r: dict[str, Any]) -> str:
    g = r["graph"]
    shape, d = g["shape"], g["degree"]
    return (
        f"tenant `{g['tenant']}`: {shape['entities']:,} entities, {shape['relations']:,} relations, "
        f"{g['observations']:,} observations; degree max {d['max']:,}, p99 {d['p99']}, median {d['p50']}, "
        f"mean {d['mean']}; generated in {g['seconds']:.0f} s (ready in {g['ready_in_s']:.0f} s this run)"
    )


def _answers(x: dict[str, Any]) -> str:
    """What the measured calls returned, so a fast figure cannot hide an empty answer."""
    if "relations_per_answer_mean" in x:
        ping = _ms(x["select_1_roundtrip"]["p50"])
        return f"{x['relations_per_answer_mean']} relations each; a SELECT 1 round trip: {ping} ms"
    if "neighbors_mean" in x:
        return f"{x['neighbors_mean']} neighbours each, {x['truncated_share']:.0%} cut by the limit"
    if "found_share" in x:
        return f"{x['found_share']:.0%} found, mean length {x['length_mean']}"
    if "merge_existing_per_s" in x:
        return f"merging into the same 100 names again: {x['merge_existing_per_s']:,.0f}/s"
    if "single_relation_call" in x:
        return f"one relation per call: p50 {_ms(x['single_relation_call']['p50'])} ms"
    return ""


def store(r: dict[str, Any]) -> str:
    rows = []
    for c in r["store"]["cases"]:
        svc, floor, q = c["service"], c["floor"], c.get("query_only")
        tp = c.get("throughput")
        measured = (
            f"{tp['service_per_s']:,.0f}/s (floor {tp['floor_per_s']:,.0f}/s)"
            if tp
            else f"{_ms(svc['p50'])} / {_ms(svc['p95'])} / {_ms(svc['p99'])}"
        )
        floor_txt = f"{_ms(floor['p50'])} / {_ms(floor['p95'])}"
        if q:
            floor_txt += f" (main query alone {_ms(q['p50'])})"
        rows.append([c["name"], measured, floor_txt, _target(c), _answers(c.get("extra") or {})])
    w = r["store"]["writer"]
    header = ["operation", "service p50 / p95 / p99 ms (or rate)", "floor p50 / p95 ms", "target", "answers"]
    table = _table(header, rows)
    return f"{table}\n\nBackground writer: {w.get('per_second')} writes/s, {w.get('errors')} errors."


def http(r: dict[str, Any]) -> str:
    h = r["http"]
    rows = []
    for x in [*h["runs"], *h.get("engram_without_database", [])]:
        share = x.get("share_of_bare_sdk")
        c = x["cores"]
        cpu = x.get("cpu_ms_per_call") or {}
        vs = x.get("server_cpu_vs_bare_sdk")
        if share is None:
            verdict = "-"
        elif x["target"] == "engram get_entity":
            verdict = f"{share:.0%}: {'met' if share >= 0.7 else '**missed**'}"
        else:
            verdict = f"{share:.0%}"
        rows.append(
            [
                x["target"],
                x["era"],
                f"{x['per_second']:,.0f}",
                " / ".join(str(v) for v in x["per_round"]),
                x["errors"],
                _ms(x["p50_ms"]),
                _ms(x["p95_ms"]),
                verdict,
                f"{_ms(cpu.get('server'))} / {_ms(cpu.get('database'))}" if cpu else "-",
                f"{vs:.2f}x" if vs is not None else "-",
                f"{c['server']} / {c['database']} / {c['clients']} / {c['machine']}",
            ]
        )
    header = [
        "server",
        "protocol",
        "calls/s (median)",
        "per round",
        "errors",
        "p50 ms",
        "p95 ms",
        "share of bare SDK (target ≥ 70%)",
        "CPU ms per call: server / db",
        "server CPU per call vs bare SDK (target ≤ 1.5x)",
        "cores: server / db / clients / machine",
    ]
    note = f"{h['clients']} clients, {h['rounds']} rounds of {h['seconds']:g} s per target."
    return note + "\n\n" + _table(header, rows)


def reference(r: dict[str, Any]) -> str:
    from bench.reference import ENGRAM, FRESH_IMPORT, REFERENCE, TARGETS

    ref = r["reference"]
    out = []
    if floor := ref.get("floor"):
        out.append(
            f"Floor, same run: a bare MCPServer's trivial tool over HTTP through the same client, one call "
            f"at a time (no auth, no database): p50 {_ms(floor['p50'])} ms, p95 {_ms(floor['p95'])} ms."
        )
    for n, row in ref["sizes"].items():
        if "tools_analyzed" not in row.get(ENGRAM, {}) or REFERENCE not in row:
            out.append(f"{int(n):,} entities: **failed**: {row.get('error', 'incomplete')}")
            continue
        rows = []
        ref_tools, eng = row[REFERENCE]["tools"], row[ENGRAM]
        for tool, fresh in eng["tools"].items():
            lat, analyzed = ref_tools.get(tool), eng["tools_analyzed"][tool]
            ratio = row.get("ratios", {}).get(tool)
            rows.append(
                [
                    tool,
                    _ms(lat["p50"]) if lat else "skipped",
                    _ms(fresh["p50"]),
                    _ms(fresh["max"]),
                    _ms(analyzed["p50"]),
                    f"{ratio:.1f}x" if ratio is not None else "-",
                ]
            )
        seed_r, seed_e = row[REFERENCE]["seed"], eng["seed"]
        for what, key in (("create_entities", "entities_per_s"), ("create_relations", "relations_per_s")):
            rate_r = f"{seed_r[key]:,}/s" if seed_r.get(key) else "-"
            rows.append([f"seed: {what}, 100/call", rate_r, f"{seed_e[key]:,}/s", "", "", "-"])
        size = row.get("reference_file_bytes")
        notes = []
        if b := seed_r.get("bounded"):
            notes.append(
                f"The reference's seeding through its create calls was stopped at its bound of {b['seconds']:g} s, "
                f"after {b['entities_by_calls']:,} entities and {b['relations_by_calls']:,} relations; the rest of "
                "the same data was written into its file directly, in its own format."
            )
        if retried := seed_e.get("retried_calls"):
            notes.append(
                f"{retried['count']} of Engram's seeding calls answered `unavailable` (a missed call deadline) and "
                "were made again."
            )
        if b := row[REFERENCE].get("tools_bounded"):
            notes.append(
                f"The reference's tools were stopped at their bound of {b['seconds']:g} s after {b['rounds']} of "
                f"{b['of']} rounds (each round calls every tool once)."
            )
        ratios = row.get("ratios") or {}
        target = TARGETS.get(int(n))
        if ratios and target:
            worst = min(ratios, key=lambda t: ratios[t])
            verdict = "met" if ratios[worst] >= target else "**missed**"
            notes.append(f"Target ≥ {target:g}x on every tool: {verdict} (lowest: {worst}, {ratios[worst]:.1f}x).")
        slow = eng.get("slowest_just_imported")
        if slow and int(n) == FRESH_IMPORT[0]:
            verdict = "met" if slow["ms"] <= FRESH_IMPORT[1] else "**missed**"
            notes.append(
                f"Slowest Engram call right after the import: {slow['tool']}, {_ms(slow['ms'])} ms "
                f"(target: none over {FRESH_IMPORT[1]:g} ms: {verdict})."
            )
        out.append(
            f"{int(n):,} entities, {seed_r['relations']:,} relations"
            + (f" (reference file {size / 1e6:.1f} MB)" if size else "")
            + ":\n\n"
            + _table(
                [
                    "tool",
                    f"{REFERENCE} p50 ms",
                    f"{ENGRAM} p50 ms, just imported",
                    "same, slowest call",
                    "same, planner statistics fresh",
                    "reference / engram (fresh statistics)",
                ],
                rows,
            )
            + ("\n\n" + "\n".join(f"- {x}" for x in notes) if notes else "")
        )
    return "\n\n".join(out)


def render(r: dict[str, Any]) -> str:
    parts = ["## Run", machine(r)]
    if "graph" in r:
        parts += ["", "## Graph", graph(r)]
    for key, title, fn in (
        ("store", "Store level (services, with the background writer)", store),
        ("http", "Over HTTP", http),
        ("reference", "Reference server-memory", reference),
    ):
        if key not in r:
            continue
        parts += ["", f"## {title}"]
        if "error" in r[key]:
            parts.append(f"**Failed**: {r[key]['error']}")
        elif "skipped" in r[key]:
            parts.append(f"Skipped: {r[key]['skipped']}.")
        else:
            parts.append(fn(r))
    return "\n".join(parts)
