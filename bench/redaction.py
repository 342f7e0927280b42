"""`python -m bench.redaction`: what redaction (app/services/redaction.py) finds, what it touches by
mistake, and what it costs, in process (no server, no database).

Measured:
- recall: a corpus of secret shapes (SHAPES: made-up values of every kind the hooks must hide), each
  drawn DRAWS times with fresh random values: the share redacted (the secret gone from the text);
- false positives: the share of ordinary texts touched at all: the turns of the conversational-memory
  development set (../shared/data/conversational-memory/, read in place; skipped, saying so, when
  absent), and the paragraphs of this project's docs (technical prose, commands, URLs);
- time: each adversarial shape (WORST) at the hook's body limit, 256 KB: the CPU time of one
  redaction (thread time, so that the machine's other load counts less), best and median of runs;
- the event loop: while texts of 256 KB are redacted through `redact_off_loop`, the delay of a
  1 ms timer on the same loop (what any other request would wait), against an idle loop.

    python -m bench.redaction [--results FILE]
    python -m bench.redaction --quick   # fewer draws and runs
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import string
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from app.services.redaction import redact, redact_off_loop
from bench import env
from bench.recall import DATA as _DATA

LIMIT = 256 * 1024  # ENGRAM_HOOK_MAX_BYTES' default
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"

# Beside the checkout, or beside the folder of worktrees the checkout is one of.
DATA = next((p for p in (_DATA, env.ROOT.parent.parent / _DATA.relative_to(env.ROOT.parent)) if p.exists()), _DATA)

Shape = tuple[str, str, str]  # name, text, the part that must be gone


def _r(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def shapes(rng: random.Random) -> list[Shape]:
    """One draw of every shape: (name, text holding a secret, the secret)."""
    r = lambda n, a=ALNUM: _r(rng, n, a)  # noqa: E731
    key = "ghp_" + r(36)
    out = [
        ("gitlab", "my gitlab token is {} ok", "glpat-" + r(20, URLSAFE)),
        ("npm_rc", "//registry.npmjs.org/:_authToken={}", "npm_" + r(36)),
        ("npm", "publish with {} please", "npm_" + r(36)),
        ("pypi", "twine upload -p {} dist/*", "pypi-AgEIcHlwaS5vcmc" + r(70, URLSAFE)),
        ("huggingface", "HF token {}", "hf_" + r(34, string.ascii_letters)),
        ("sendgrid", "key: {}", "SG." + r(22, URLSAFE) + "." + r(43, URLSAFE)),
        (
            "azure_storage",
            "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={};EndpointSuffix=x",
            r(86, B64) + "==",
        ),
        ("digitalocean", "doctl auth init -t {}", "dop_v1_" + r(64, HEX)),
        ("databricks", "export DATABRICKS_HOST=x; token {}", "dapi" + r(32, HEX)),
        ("twilio_key", "twilio api key {}", "SK" + r(32, HEX)),
        ("twilio_account", "account {}", "AC" + r(32, HEX)),
        ("telegram", "bot token {}", str(rng.randint(10**8, 10**10 - 1)) + ":AA" + r(33, URLSAFE)),
        ("discord", "discord bot {}", "MT" + r(22) + "." + r(6, URLSAFE) + "." + r(27, URLSAFE)),
        ("export_api_key", "export X_API_KEY={}", r(32)),
        ("db_password", "DB_PASSWORD={}", r(14)),
        ("pgpassword", "PGPASSWORD={} psql -h db", r(12)),
        ("redis_url", "REDIS_URL=redis://:{}@cache.internal:6379/0", r(16)),
        ("postgres_upper", "POSTGRES://admin:{}@db.example.com/app", r(14)),
        (
            "aws_cli",
            '{{"AccessKeyId": "ASIA' + r(16, string.ascii_uppercase) + '", "SecretAccessKey": "{}"}}',
            r(40, B64),
        ),
        ("aws_env", "AWS_SECRET_ACCESS_KEY={}", r(40, B64)),
        ("aws_access_key", "id {}", "AKIA" + r(16, string.ascii_uppercase + string.digits)),
        ("pgp_private", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{}\n-----END PGP PRIVATE KEY BLOCK-----", r(64, B64)),
        ("rsa_private", "-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----", "MIIEow" + r(58, B64)),
        (
            "gcp_service_account",
            '{{"private_key": "-----BEGIN PRIVATE KEY-----\\n{}\\n-----END PRIVATE KEY-----\\n"}}',
            "MIIEvQ" + r(60, B64),
        ),
        ("openai", "OPENAI_API_KEY is {}", "sk-proj-" + r(48, URLSAFE)),
        ("anthropic", "key {}", "sk-ant-api03-" + r(90, URLSAFE)),
        ("github", "gh token {}", "ghp_" + r(36)),
        ("github_fine_grained", "gh token {}", "github_pat_" + r(22) + "_" + r(59)),
        ("slack", "slack {}", "xoxb-" + r(12, string.digits) + "-" + r(13, string.digits) + "-" + r(24)),
        (
            "slack_webhook",
            "post to https://hooks.slack.com/services/{}",
            "T" + r(8, string.ascii_uppercase) + "/B" + r(8, string.ascii_uppercase) + "/" + r(24),
        ),
        ("google", "maps key {}", "AIza" + r(35, URLSAFE)),
        ("stripe", "stripe {}", "sk_live_" + r(24)),
        ("shopify", "shopify {}", "shpat_" + r(32, HEX)),
        ("jwt", "cookie {}", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIx" + r(20) + "." + r(43, URLSAFE)),
        ("bearer", "curl -H 'Authorization: Bearer {}'", r(40)),
        ("authorization", "authorization: {}", r(30)),
        ("url_password", "git clone https://bob:{}@git.example.com/x.git", r(16)),
        ("password_yaml", "password: {}", r(12)),
        ("password_json", '{{"password": "{}"}}', r(12)),
        ("mailchimp", "mc {}", r(32, HEX) + "-us12"),
        ("engram", "key {}", "egk_" + r(12, string.ascii_lowercase + string.digits) + "_" + r(32)),
        ("high_entropy", "the value is {} for prod", r(44, B64)),
        ("wrapped", "token: " + key[:20] + "\n{}", key[20:]),
    ]
    return [(name, text.format(secret), secret) for name, text, secret in out]


DENY = ("ACME-*", "hunter?")
DENIED: list[Shape] = [
    ("deny_punctuation", "my password is hunter2.", "hunter2"),
    ("deny_glob", "ticket (ACME-4411).", "ACME-4411"),
]


def recall(draws: int) -> dict[str, Any]:
    rng = random.Random(7)
    missed: dict[str, int] = {}
    total = found = 0
    for _ in range(draws):
        for name, text, secret in [*shapes(rng), *DENIED]:
            total += 1
            if secret not in redact(text, DENY)[0]:
                found += 1
            else:
                missed[name] = missed.get(name, 0) + 1
    return {
        "shapes": len(shapes(rng)) + len(DENIED),
        "texts": total,
        "redacted": found,
        "share": found / total,
        "missed": missed,
    }


def ordinary_texts() -> dict[str, list[str]]:
    sets: dict[str, list[str]] = {}
    if DATA.exists():
        turns = []
        for sample in orjson.loads(DATA.read_bytes()):
            for key, value in sample["conversation"].items():
                if key.startswith("session_") and isinstance(value, list):
                    turns += [t["text"] for t in value]
        sets["conversational-memory turns"] = turns
    docs = sorted((env.ROOT / "docs").glob("*.md"))
    sets["project docs paragraphs"] = [p for d in docs for p in d.read_text().split("\n\n") if p.strip()]
    return sets


def false_positives() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, texts in ordinary_texts().items():
        touched = [t for t in texts if redact(t)[1]]
        out[name] = {"texts": len(texts), "touched": len(touched), "share": len(touched) / len(texts)}
    if not DATA.exists():
        out["skipped"] = f"{DATA} is absent: the conversational-memory turns were not measured"
    return out


def _fill(unit: str, size: int = LIMIT) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def worst_inputs(size: int = LIMIT) -> dict[str, str]:
    """Texts made to be slow for some detector: long runs a pattern starts on and never finishes, or
    dense matches; all of `size` bytes (ASCII)."""
    rng = random.Random(3)
    return {
        "authorization + spaces": "authorization:" + " " * (size - 15) + "!",
        "spaces": " " * size,
        "one letter": "a" * size,
        "random alphanumerics": _r(rng, size),
        "high-distinct words": _fill(" ".join(_r(rng, 23) for _ in range(size // 24)) + " ", size),
        "sk- repeated": _fill("sk-", size),
        "eyJ. repeated": _fill("eyJa.", size),
        "BEGIN without END": _fill("-----BEGIN RSA PRIVATE KEY-----\n", size),
        "scheme://user: repeated": _fill("a://b:", size),
        "password= repeated": _fill("password=", size),
        "password: + spaces": _fill("password:  ", size),
        "keyword after a long word": "a" * (size - 8) + "password",
        "bearer repeated": _fill("bearer ", size),
        "//x/ repeated": "//" + _fill("a/", size - 2),
        "digits: repeated": _fill("12345678:", size),
        "wrapped base64 lines": _fill("AAAAAAAAAAAAAAA1\n", size),
        "token=value pairs": _fill("token=abcd1234 ", size),
        "AWS keys back to back": _fill("AKIAIOSFODNN7EXAMPLE ", size),
        "deny-listed words": _fill("ACME-1 xACME hunter2. abcde ", size),
        "prose": _fill("The meeting moved to Thursday; bring the slides and the budget. ", size),
    }


def _cpu_ms(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.thread_time()
        fn()
        out.append((time.thread_time() - start) * 1000)
    return out


def timing(runs: int) -> dict[str, Any]:
    cases = {}
    for name, text in worst_inputs().items():
        ms = _cpu_ms(lambda text=text: redact(text, DENY), runs)
        cases[name] = {"bytes": len(text), "best_ms": min(ms), "median_ms": statistics.median(ms)}
    return {"runs": runs, "cases": cases, "worst_median_ms": max(c["median_ms"] for c in cases.values())}


async def _lag(seconds: float) -> list[float]:
    """How late a 1 ms sleep wakes, again and again for `seconds`: the loop's responsiveness."""
    out = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        await asyncio.sleep(0.001)
        out.append((time.perf_counter() - start - 0.001) * 1000)
    return out


async def loop_lag(texts: int) -> dict[str, Any]:
    idle = await _lag(1.0)
    heavy = list(worst_inputs().values())[:texts]
    work = asyncio.gather(*(redact_off_loop(t, DENY) for t in heavy))
    start = time.perf_counter()
    busy_task = asyncio.create_task(_lag(0.1))
    results = await work
    took = time.perf_counter() - start
    busy = await busy_task
    while len(busy) < 50:  # the timer again while more texts are redacted, for enough samples
        more = asyncio.gather(*(redact_off_loop(t, DENY) for t in heavy[:4]))
        busy += await _lag(0.2)
        await more
    q = lambda xs, p: statistics.quantiles(xs, n=100, method="inclusive")[p - 1]  # noqa: E731
    return {
        "texts": len(results),
        "seconds": took,
        "idle_p50_ms": q(idle, 50),
        "idle_p99_ms": q(idle, 99),
        "busy_p50_ms": q(busy, 50),
        "busy_p99_ms": q(busy, 99),
        "busy_max_ms": max(busy),
    }


def main(quick: bool) -> dict[str, Any]:
    return {
        "machine": {**env.machine(), "quick": quick},
        "redaction": {
            "recall": recall(3 if quick else 20),
            "false_positives": false_positives(),
            "timing": timing(2 if quick else 7),
            "event_loop": asyncio.run(loop_lag(4 if quick else 12)),
        },
    }


def report(results: dict[str, Any]) -> str:
    r = results["redaction"]
    lines = ["## Redaction", ""]
    rc = r["recall"]
    lines.append(
        f"Secret shapes: {rc['redacted']}/{rc['texts']} redacted ({rc['share']:.1%}), {rc['shapes']} shapes; "
        f"missed: {rc['missed'] or 'none'}"
    )
    for name, fp in r["false_positives"].items():
        lines.append(
            f"{name}: {fp}"
            if name == "skipped"
            else f"False positives, {name}: {fp['touched']}/{fp['texts']} ({fp['share']:.2%})"
        )
    lines += ["", "| input (256 KB) | CPU ms, best | median |", "|---|---|---|"]
    for name, c in r["timing"]["cases"].items():
        lines.append(f"| {name} | {c['best_ms']:.1f} | {c['median_ms']:.1f} |")
    e = r["event_loop"]
    lines.append(
        f"\nEvent loop, a 1 ms timer's delay: idle p50 {e['idle_p50_ms']:.2f} / p99 {e['idle_p99_ms']:.2f} ms; "
        f"while {e['texts']} texts of 256 KB are redacted off the loop: p50 {e['busy_p50_ms']:.2f} / "
        f"p99 {e['busy_p99_ms']:.2f} / max {e['busy_max_ms']:.2f} ms"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.redaction", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer draws and runs")
    parser.add_argument("--results", type=Path, help="where to keep the raw figures (JSON)")
    args = parser.parse_args()
    results = main(args.quick)
    print(report(results))
    if args.results:
        args.results.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
