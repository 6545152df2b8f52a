"""`python -m bench.w1_cpu`: W1 (one invocation of 1,000 sequential no-op steps) timed in
CPU seconds of this process as well as wall-clock seconds.

On a shared machine the wall clock of a step swings several-fold with other processes'
load; the CPU time this process spends per step swings far less. To compare two
checkouts, run it from each alternately (PYTHONPATH or the working directory selects the
code) and compare the medians pair by pair, as docs/performance.md does for the cost of
OpenTelemetry when it is off.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import anyio

from runtime import Engine

from . import _agents


async def _one(path: str, mode: str, steps: int) -> tuple[float, float]:
    async with Engine.open(path, durability=mode) as engine:
        cpu, wall = time.process_time(), time.perf_counter()
        outcome = await engine.run(_agents.steps, steps)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert outcome.result == steps, outcome
    return cpu / steps * 1e6, wall / steps * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.w1_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("sync", "async", "exit"), default="exit")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args(argv)
    cpu, wall = [], []
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory() as tmp:
            c, w = anyio.run(_one, tmp + "/db", args.mode, args.steps)
        cpu.append(c)
        wall.append(w)
    print(json.dumps({"mode": args.mode, "steps": args.steps, "cpu_us_per_step": round(statistics.median(cpu), 2),
                      "wall_us_per_step": round(statistics.median(wall), 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
