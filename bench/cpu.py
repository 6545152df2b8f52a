"""`python -m bench.cpu [--mode async] [--reps 15]`: the CPU time of the process per step.

One invocation runs 1,000 sequential no-op steps without arguments on a fresh LMDB store,
`--reps` times; then an invocation that journaled 5,000 steps and waits on a promise is
resumed (replayed to its wait point) `--reps` times. Printed: the fastest repetition and
the median, in CPU time of this process (`time.process_time`), which other processes on
a loaded machine disturb far less than wall-clock time. Run two versions of the code
alternately, each in its own process, to compare them.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import anyio

from runtime import Context, Engine


def noop() -> int:
    return 1


async def steps(ctx: Context, n: int) -> int:
    for _ in range(n):
        await ctx.run("s", noop)
    return n


async def steps_then_wait(ctx: Context, n: int) -> int:
    await steps(ctx, n)
    await ctx.promise("go")
    return n


async def _measure(mode: str, reps: int) -> tuple[list[float], list[float]]:
    per_step, replayed = [], []
    with tempfile.TemporaryDirectory() as path:
        async with Engine.open(path, durability=mode) as engine:
            for rep in range(reps):
                started = time.process_time()
                await engine.run(steps, 1000, id=f"steps-{rep}")
                per_step.append((time.process_time() - started) / 1000 * 1e6)
            await engine.run(steps_then_wait, 5000, id="long")
            for _ in range(reps):
                started = time.process_time()
                await engine.resume("long")
                replayed.append(5001 / (time.process_time() - started))
    return per_step, replayed


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="async", choices=["sync", "async", "exit"])
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    per_step, replayed = anyio.run(_measure, args.mode, args.reps)
    print(f"{args.mode}: step {min(per_step):.2f} us of CPU (median {statistics.median(per_step):.2f}); "
          f"replay {max(replayed):,.0f} entries/s of CPU (median {statistics.median(replayed):,.0f})")


if __name__ == "__main__":
    main()
