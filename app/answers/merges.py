"""The answers of the merge tools (app/mcp/tools/merges.py): likely duplicates, a merge, aliases."""

from __future__ import annotations

from app.answers.text import block, lines, more
from app.services import models


def _reason(x: models.DuplicateReason) -> str:
    if x.kind == "shared_neighbors":
        some = f" ({', '.join(block(e) for e in x.examples)})" if x.examples else ""
        return f"{x.count or 0} shared neighbours{some}"
    alike = f" {x.similarity:.0%} alike" if x.similarity is not None else " alike"
    return ("names" if x.kind == "name" else "meanings") + alike


def _pair(p: models.DuplicatePair) -> str:
    if p.a.type == p.b.type:
        both = f"{block(p.a.name)} ~ {block(p.b.name)} ({block(p.a.type)})"
    else:
        both = f"{block(p.a.name)} ({block(p.a.type)}) ~ {block(p.b.name)} ({block(p.b.type)})"
    return f"{both}: {'; '.join(_reason(x) for x in p.reasons)}"


def duplicates(page: models.DuplicatesPage) -> str:
    """Likely pairs, best first; the last line says where the next slice starts."""
    if not page.pairs:
        head = f"No likely duplicates among the {page.scanned} entities scanned."
        return lines([f"{head}\n"], more(page.next_cursor))
    chunks = [f"{_pair(p)}\n" for p in page.pairs]
    return lines(chunks, f"Scanned {page.scanned} entities.", more(page.next_cursor))


def merged(r: models.MergeResult) -> str:
    names = ", ".join(block(e.name) for e in r.merged)
    moved = [
        f"{n} {what}"
        for n, what in (
            (r.observations_added, "facts moved"),
            (r.relations_moved, "relations moved"),
            (r.relations_folded, "relations folded into copies"),
            (r.self_loops_dropped, "self-loops dropped"),
        )
        if n
    ]
    out = [
        f"Merged {names} into {block(r.entity.name)} v{r.entity.version}" + (f": {', '.join(moved)}." if moved else ".")
    ]
    if r.aliases_added:
        out.append(f"New aliases: {', '.join(block(a) for a in r.aliases_added)}.")
    if r.aliases_not_kept:
        out.append(
            f"Not kept as aliases (another entity holds them): {', '.join(block(a) for a in r.aliases_not_kept)}."
        )
    if r.property_conflicts:
        out.append(f"Properties that differed (the rule chose): {', '.join(block(k) for k in r.property_conflicts)}.")
    if r.embeddings_pending:
        out.append(f"{r.embeddings_pending} texts are found by meaning once embedded.")
    return "\n".join(out)


def aliases(r: models.AliasesResult, added: bool) -> str:
    verb, held = ("Added", "already held") if added else ("Removed", "not held")
    done = f"{verb} {', '.join(block(a) for a in r.changed)}" if r.changed else f"{verb} none"
    if r.unchanged:
        done += f"; {held}: {', '.join(block(a) for a in r.unchanged)}"
    now = f"Aliases now: {', '.join(block(a) for a in r.aliases)}." if r.aliases else "No aliases now."
    return f"{block(r.entity.name)} v{r.entity.version}: {done}. {now}"
