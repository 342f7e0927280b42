"""`python -m bench.auth`: the built-in authorization server's steps, one at a time, over HTTP.

A server (`engram serve`, builtin mode, no embedding model) on a database of its own and one local
account. Each round is what a new assistant does, timed step by step: register (RFC 7591), open
/authorize in a fresh browser (no sign-in session yet), post the password (argon2id), approve on
the consent page, exchange the code; then a run of refresh-token grants (each rotating the token)
and a revocation. Floors from the same run: argon2id verification of the same password in this
process (what a sign-in must spend), an ES256 signature of an access token's claims (what an issue
must spend), and a bare Starlette handler over HTTP on the same machine (what any POST costs).

    python -m bench.auth [--rounds N] [--refreshes N] [--results FILE]
    python -m bench.auth --quick     # a few rounds in a scratch database: checks that it runs
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import orjson
from joserfc import jwt
from joserfc.jwk import ECKey

from app.authserver.credentials import check_password, hash_password
from bench import env, procs
from bench.stats import Latency
from tests.support.auth import PASSWORD
from tests.support.oauth_agent import hidden_fields
from tests.support.server import engram, free_port, serve_builtin

REDIRECT = "http://127.0.0.1:33418/callback"
STEPS = ("register", "authorize", "sign in", "consent", "code exchange", "refresh", "revoke")
UNLIMITED = {
    f"ENGRAM_{what}": "100000"
    for what in ("REGISTER_PER_MINUTE", "TOKEN_PER_MINUTE", "AUTHORIZE_PER_MINUTE", "SIGN_IN_PER_MINUTE")
}


class Clock:
    """Samples per step, in nanoseconds."""

    def __init__(self) -> None:
        self.samples: dict[str, list[int]] = {step: [] for step in STEPS}

    async def time(self, step: str, call: Awaitable[httpx2.Response], expect: int) -> httpx2.Response:
        started = time.perf_counter_ns()
        answer = await call
        self.samples[step].append(time.perf_counter_ns() - started)
        if answer.status_code != expect:
            raise RuntimeError(f"{step}: HTTP {answer.status_code}: {answer.text[:300]}")
        return answer


async def one_round(base: str, username: str, tenant: str, refreshes: int, clock: Clock) -> None:
    """A new client signs a person in from a fresh browser, then refreshes and revokes."""
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        metadata = {"client_name": "Bench", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}
        registered = await clock.time("register", http.post("/register", json=metadata), 201)
        client_id = registered.json()["client_id"]
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "scope": "memory:read memory:write",
            "state": "s",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": f"{base}/mcp",
        }
        start = await clock.time("authorize", http.get("/authorize", params=query, follow_redirects=True), 200)
        signed_in = await clock.time(
            "sign in",
            http.post("/oauth/sign-in", data={**hidden_fields(start.text), "username": username, "password": PASSWORD}),
            303,
        )
        consent = await http.get(signed_in.headers["location"])
        decision = {**hidden_fields(consent.text), "decision": "allow", "tenant": tenant}
        approved = await clock.time("consent", http.post("/oauth/consent", data=decision), 303)
        code = parse_qs(urlsplit(approved.headers["location"]).query)["code"][0]
        mine = {"client_id": client_id, "resource": f"{base}/mcp"}
        grant = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "code_verifier": verifier}
        tokens = (await clock.time("code exchange", http.post("/token", data={**grant, **mine}), 200)).json()
        refresh = tokens["refresh_token"]
        for _ in range(refreshes):
            form = {"grant_type": "refresh_token", "refresh_token": refresh, **mine}
            refresh = (await clock.time("refresh", http.post("/token", data=form), 200)).json()["refresh_token"]
        await clock.time("revoke", http.post("/revoke", data={"token": refresh, "client_id": client_id}), 200)


async def floors_in_process(iterations: int) -> dict[str, dict[str, Any]]:
    """argon2id verification of the bench password, and an ES256 signature of a token's claims."""
    stored = await hash_password(PASSWORD)
    key = ECKey.generate_key("P-256", parameters={"kid": "bench"})
    claims = {"iss": "http://127.0.0.1", "aud": "http://127.0.0.1/mcp", "sub": str(uuid.uuid4()), "scope": "a b"}

    async def verify() -> None:
        assert await check_password(stored, PASSWORD)

    async def sign() -> None:
        jwt.encode({"alg": "ES256", "kid": "bench", "typ": "at+jwt"}, {**claims, "exp": time.time() + 600}, key)

    return {
        "argon2id verify (in process)": (await _loop(verify, iterations)).as_dict(),
        "ES256 sign (in process)": (await _loop(sign, iterations * 10)).as_dict(),
    }


async def _loop(call: Callable[[], Awaitable[None]], iterations: int) -> Latency:
    samples = []
    for _ in range(iterations):
        started = time.perf_counter_ns()
        await call()
        samples.append(time.perf_counter_ns() - started)
    return Latency.of(samples)


async def http_floor(iterations: int) -> dict[str, Any]:
    """A bare Starlette handler answering a form POST, under uvicorn as `engram serve` runs."""
    port = free_port()
    with procs.serve(procs.python("-m", "bench.floors", "starlette", str(port)), port):
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}

            async def post() -> None:
                assert (await http.post("/mcp", json=body)).status_code == 200

            return (await _loop(post, iterations)).as_dict()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = env.settings()
    name = env.scratch_name("auth") if args.quick else "engram_bench_auth"
    print(f"a fresh database {name!r} ...")
    s = await env.fresh_database(s, name)
    rounds, refreshes = (3, 5) if args.quick else (args.rounds, args.refreshes)
    clock = Clock()
    with serve_builtin(s, **UNLIMITED) as server:
        tenant, username = "bench-auth", f"bench{uuid.uuid4().hex[:8]}"
        for command, stdin in (
            (("user", "add", username, "--password-stdin"), PASSWORD),
            (("member", "add", username, "--tenant", tenant, "--role", "writer"), None),
        ):
            done = engram(server.env, *command, stdin=stdin)
            if done.returncode != 0:
                raise RuntimeError(done.stderr)
        await one_round(server.base, username, tenant, refreshes, clock)  # warm-up: pools, keys, caches
        clock = Clock()
        for _ in range(rounds):
            await one_round(server.base, username, tenant, refreshes, clock)
    return {
        "machine": {**env.machine(), "quick": args.quick},
        "rounds": rounds,
        "refreshes_per_round": refreshes,
        "steps": {step: Latency.of(samples).as_dict() for step, samples in clock.samples.items()},
        "floors": {**await floors_in_process(rounds), "bare Starlette POST (HTTP)": await http_floor(rounds * 10)},
    }


def report(r: dict[str, Any]) -> str:
    lines = [
        f"## Authorization server ({r['rounds']} rounds, {r['refreshes_per_round']} refreshes each)",
        "",
        "| step | n | p50 ms | p95 ms | max ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for step, x in {**r["steps"], **r["floors"]}.items():
        lines.append(f"| {step} | {x['n']} | {x['p50']:.2f} | {x['p95']:.2f} | {x['max']:.2f} |")
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few rounds in a scratch database")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--refreshes", type=int, default=10)
    parser.add_argument("--results", help="write the raw figures here (JSON)")
    args = parser.parse_args()
    results = asyncio.run(main(args))
    print(report(results))
    if args.results:
        with open(args.results, "wb") as f:
            f.write(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    cli()
