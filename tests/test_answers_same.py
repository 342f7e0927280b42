"""Every read tool's answer, on every endpoint, with several budgets, limits and forms, and the hook
briefs: byte for byte as recorded in tests/data/answers.json (tests/support/answers.py says what is
called and what is left out as differing from run to run).

A change that means to change what a model reads records the file again and shows the difference
in its commit: `ENGRAM_RECORD_ANSWERS=1 pytest tests/test_answers_same.py`.
"""

from __future__ import annotations

import difflib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from app.config import Settings
from tests.support.answers import briefs, record, seed
from tests.support.hooks import engram
from tests.support.server import ROOT, Server, serve

RECORDED = ROOT / "tests" / "data" / "answers.json"
PROMPTS = [
    "Where does Ada work and who mentors her?",
    "What did Ada compute on the Analytical Engine, and when was it built?",
    "Tell me about the charity race.",
]


@pytest.fixture(scope="module")
def recorder(db_settings: Settings) -> Iterator[Server]:
    """A server as deployed by default (text answers only) that keeps no hook turns (a kept prompt
    would be recalled by the next), reads a tenant's hook settings afresh, and ranks by words and
    names alone: a ranking by meaning differs in its last places from run to run (the vectors of a
    batch differ in their last bits with the batch), and this test is about printing and cutting."""
    quiet = {"ENGRAM_HOOK_CAPTURE": "false", "ENGRAM_LIMITS_CACHE_SECONDS": "0", "ENGRAM_EMBEDDING_PROVIDER": "none"}
    with serve(db_settings, ENGRAM_TOOL_OUTPUT_SCHEMAS="false", **quiet) as running:
        yield running


async def test_every_read_answer_is_as_recorded(server: Server, recorder: Server) -> None:
    tenant = f"same-{uuid.uuid4().hex[:10]}"
    engram(recorder, "tenant", "create", tenant)
    data = await seed(server, tenant)
    answers = await record(recorder, tenant, data)
    answers |= await briefs(recorder, tenant, data, PROMPTS)
    engram(recorder, "hooks", "set", tenant, "--prompt-tokens", "60", "--start-tokens", "150")
    small = await briefs(recorder, tenant, data, PROMPTS, first=100)
    answers |= {f"{key} (small budgets)": value for key, value in small.items()}
    answers = {key: value.replace(tenant, "<tenant>") for key, value in answers.items()}
    _compare(answers)


def _compare(answers: dict[str, str]) -> None:
    if os.environ.get("ENGRAM_RECORD_ANSWERS"):
        RECORDED.write_bytes(orjson.dumps(answers, option=orjson.OPT_INDENT_2) + b"\n")
    if out := os.environ.get("ENGRAM_ANSWERS_OUT"):  # the answers of this run, to compare by other means
        Path(out).write_bytes(orjson.dumps(answers, option=orjson.OPT_INDENT_2) + b"\n")
    recorded = orjson.loads(RECORDED.read_bytes())
    assert answers.keys() == recorded.keys()
    changed = [key for key in answers if answers[key] != recorded[key]]
    diff = "\n".join(
        line
        for key in changed[:5]
        for line in difflib.unified_diff(recorded[key].splitlines(), answers[key].splitlines(), key, key, lineterm="")
    )
    assert not changed, f"{len(changed)} answers changed:\n{diff}"
