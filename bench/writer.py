"""The background write load: `python -m bench.writer TENANT RATE NAMES`, until SIGTERM; prints `ready`
once it writes, and a JSON summary at the end.

Runs in its own process so the readers' latency measures the database under writes, not two
workloads sharing one event loop. It cycles through the three writes users make most: create an
entity, add an observation to an existing one, and connect the new entity to an existing one;
each is one service call, one transaction, as a tool call would be.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import time
import uuid

import orjson

from app.services import models
from bench import env
from bench.stats import Latency


async def run(tenant: str, rate: float, names: list[str]) -> dict[str, object]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    who = env.principal(tenant)
    rng = random.Random()
    run_id = uuid.uuid4().hex[:6]
    samples: list[int] = []
    errors = 0
    async with env.services(env.settings()) as (_, s):
        sys.stdout.write("ready\n")  # the model is loaded: the measured writes start now
        sys.stdout.flush()
        started = time.monotonic()
        i = 0
        while not stop.is_set():
            kind = i % 3
            t0 = time.perf_counter_ns()
            try:
                if kind == 0:
                    item = models.EntityIn(name=f"Writer {run_id} {i}", type="note", observations=[f"written at {i}"])
                    with env.tool_call(who, "upsert_entities"):
                        await s.entities.upsert(who, [item], "merge")
                elif kind == 1:
                    obs = models.ObservationsIn(entity=rng.choice(names), observations=[f"seen {run_id} {i}"])
                    with env.tool_call(who, "add_observations"):
                        await s.entities.change_observations(who, [obs], add=True)
                else:
                    ends = {"from": f"Writer {run_id} {i - 2}", "to": rng.choice(names)}
                    rel = models.RelationIn(**ends, type="mentions")
                    with env.tool_call(who, "connect_entities"):
                        await s.relations.connect(who, [rel])
            except Exception as exc:
                errors += 1
                print(f"writer: {type(exc).__name__}: {exc}", file=sys.stderr)
            samples.append(time.perf_counter_ns() - t0)
            i += 1
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
        elapsed = time.monotonic() - started
    return {
        "writes": len(samples),
        "errors": errors,
        "per_second": round(len(samples) / elapsed, 1),
        "latency": Latency.of(samples).as_dict() if samples else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tenant")
    parser.add_argument("rate", type=float)
    parser.add_argument("names", help="a JSON file holding a list of existing entity names")
    args = parser.parse_args()
    with open(args.names, "rb") as f:
        names = orjson.loads(f.read())
    result = asyncio.run(run(args.tenant, args.rate, names))
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


if __name__ == "__main__":
    main()
