"""`python -m bench.handoff`: the cost of handing a plain step function to the step threads
and getting its result back on the event loop, alone, without a journal.

For each event loop (asyncio, trio) it times `StepThreads.run(no-op)`:
- `one`: one call at a time, µs per call (a lone invocation's sequential steps, W1);
- `many`: `--at-once` tasks (64, the default thread limit) each making calls one after
  another, calls per second (many invocations at once, W2);
and, one call at a time on asyncio, where a call's time goes (`stages`, medians in µs):
from the submit to the function starting on its thread (the thread's wake-up), and from
there to the waiting task running again (the loop's wake-up and its own scheduling). `--compare` adds the same figures for
`loop.run_in_executor` and `anyio.to_thread.run_sync`. Medians of `--reps` repetitions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread

from runtime._handler._step_threads import StepThreads


def _noop() -> int:
    return 1


async def _one(run: Callable[[Callable[[], Any]], Awaitable[Any]], calls: int) -> float:
    for _ in range(100):  # threads started, caches warm
        await run(_noop)
    started = time.perf_counter()
    for _ in range(calls):
        await run(_noop)
    return (time.perf_counter() - started) / calls * 1e6


async def _many(run: Callable[[Callable[[], Any]], Awaitable[Any]], calls: int, at_once: int) -> float:
    async def caller(n: int) -> None:
        for _ in range(n):
            await run(_noop)

    async with anyio.create_task_group() as tg:  # warm: every thread started
        for _ in range(at_once):
            tg.start_soon(caller, 10)
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(at_once):
            tg.start_soon(caller, calls // at_once)
    return (calls // at_once) * at_once / (time.perf_counter() - started)


async def _stages(threads: StepThreads, calls: int) -> dict[str, float]:
    """One call at a time, stamped before the submit, in the function, and back in the task."""
    stamps: list[tuple[float, float, float]] = []
    clock = time.perf_counter
    started = [0.0]

    def fn() -> int:
        started[0] = clock()
        return 1

    for i in range(calls + 100):
        before = clock()
        await threads.run(fn)
        after = clock()
        if i >= 100:
            stamps.append((before, started[0], after))
    there = [(s - b) * 1e6 for b, s, _ in stamps]
    back = [(a - s) * 1e6 for _, s, a in stamps]
    total = [(a - b) * 1e6 for b, _, a in stamps]
    return {"to the thread": round(statistics.median(there), 1), "back to the task": round(statistics.median(back), 1),
            "total": round(statistics.median(total), 1), "total, mean": round(statistics.fmean(total), 1),
            "total, 90th percentile": round(statistics.quantiles(total, n=10)[-1], 1)}


def _runners(compare: bool) -> dict[str, Callable[[], Callable[[Callable[[], Any]], Awaitable[Any]]]]:
    def step_threads() -> Callable[[Callable[[], Any]], Awaitable[Any]]:
        return StepThreads().run

    runners = {"step_threads": step_threads}
    if compare:
        def executor() -> Callable[[Callable[[], Any]], Awaitable[Any]]:
            async def run(fn: Callable[[], Any]) -> Any:
                return await asyncio.get_running_loop().run_in_executor(None, fn)
            return run

        def to_thread() -> Callable[[Callable[[], Any]], Awaitable[Any]]:
            return anyio.to_thread.run_sync
        runners["run_in_executor"] = executor
        runners["anyio.to_thread"] = to_thread
    return runners


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.handoff", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--at-once", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--backends", default="asyncio,trio")
    parser.add_argument("--compare", action="store_true", help="also run_in_executor and anyio.to_thread")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    for backend in args.backends.split(","):
        for name, make in _runners(args.compare).items():
            if name == "run_in_executor" and backend != "asyncio":
                continue
            one = [anyio.run(_one, make(), args.calls, backend=backend) for _ in range(args.reps)]
            many = [anyio.run(_many, make(), args.calls * 4, args.at_once, backend=backend)
                    for _ in range(args.reps)]
            results[f"{backend} {name}"] = {"one_us_per_call": round(statistics.median(one), 1),
                                            f"{args.at_once}_at_once_calls_per_s": round(statistics.median(many))}
    if "asyncio" in args.backends:
        stages = [anyio.run(_stages, StepThreads(), args.calls) for _ in range(args.reps)]
        results["asyncio stages (µs)"] = {k: statistics.median(s[k] for s in stages) for k in stages[0]}
    print(json.dumps(results, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
