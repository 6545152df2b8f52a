"""Benchmarks of limits (docs/limits.md), in one run, medians:

- W1 with `limit=` on an uncontended concurrency+rate limit against W1 without, paired
  sample by sample, `sync`, on LMDB and on PostgreSQL (a throwaway server, fsync on).
- The fleet against the fake provider (`runtime.testing.FakeProvider`): INVOCATIONS x 5 model
  steps under a limit set to the provider's 60 requests and 40,000 tokens per PERIOD (a minute
  by default: 200 x 5 then takes about 17 minutes; `--period 5` scales the window down):
  tokens served in every window, their share of the limit while work waited, 429s.
- Hand-over: WAITERS invocations waiting on one concurrency-10 limit: how long a released unit
  takes to reach the next waiter (p50), and whether they were served by priority then arrival;
  on LMDB, and with `--pg` on PostgreSQL too.

- `w1-engine` (not run by default): W1 and W1 under the limit alternately in one engine,
  REPS pairs of STEPS-step runs, in steady state (nothing opened inside the timing).
- `share-wait` (not run by default; with `--pg` on PostgreSQL too): two engines on one store, a limit of
  concurrency 2; one runs a few steps and stops (its share, if it took one, holds a unit a
  moment longer), then a step of the other needs the second unit while its first holds one:
  how long that step waited for it (p50 and the most, over WAITERS // 50 rounds).

    python -m bench.limits [--reps 5] [--only w1,w1-engine,fleet,handover,share-wait] [--period 60] [--pg]
                           [--steps 500]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
from typing import Any

import anyio

from runtime import Context, Engine, current_step

from . import _agents

W1_STEPS = 1000


async def _w1(path: str, handler: Any, steps: int) -> float:
    async with Engine.open(path, durability="sync") as engine:
        await engine.limits.set("bench", concurrency=1000, rate="100000000/m")
        outcome = await engine.run(handler, steps)
    assert outcome.status == "completed", outcome
    return _agents.loop_seconds.pop(outcome.id) / steps * 1e6


def w1_pairs(reps: int, target: Any, steps: int) -> dict[str, list[float]]:
    """W1 and W1 under a limit, alternately (the order rotated), on fresh stores of `target()`."""
    plain: list[float] = []
    limited: list[float] = []
    for rep in range(reps):
        order = [(_agents.steps, plain), (_agents.limited_steps, limited)]
        for handler, out in order if rep % 2 == 0 else reversed(order):
            out.append(anyio.run(_w1, target(), handler, steps))
    return {"plain": plain, "limited": limited, "ratio": [b / a for a, b in zip(plain, limited, strict=True)]}


async def _w1_one_engine(path: str, steps: int, pairs: int) -> dict[str, list[float]]:
    """W1 and W1 under the limit alternately in one engine (its connections open, the rules
    read): what a step under a limit costs in steady state, apart from opening anything."""
    plain: list[float] = []
    limited: list[float] = []
    async with Engine.open(path, durability="sync") as engine:
        await engine.limits.set("bench", concurrency=1000, rate="100000000/m")
        await engine.run(_agents.limited_steps, 20)
        for rep in range(pairs):
            order = [(_agents.steps, plain), (_agents.limited_steps, limited)]
            for handler, out in order if rep % 2 == 0 else reversed(order):
                outcome = await engine.run(handler, steps)
                out.append(_agents.loop_seconds.pop(outcome.id) / steps * 1e6)
    return {"plain": plain, "limited": limited, "ratio": [b / a for a, b in zip(plain, limited, strict=True)]}


# -- the fleet against the fake provider ---------------------------------------------------------

PROMPT = "x" * 2800  # 700 prompt tokens + 16 completion tokens a request


async def _fleet(path: str, invocations: int, period: float) -> dict[str, Any]:
    import openai

    from runtime.testing import FakeProvider

    with FakeProvider(rpm=60, tpm=40_000, period=period) as provider:
        client = openai.OpenAI(base_url=provider.url, api_key="fake", max_retries=0)

        def ask(prompt: str) -> str:
            answer = client.chat.completions.create(model="fake", messages=[{"role": "user", "content": prompt}],
                                                    max_tokens=16)
            current_step().used(tokens=answer.usage.total_tokens)
            return str(answer.choices[0].message.content)

        async def agent(ctx: Context, n: int) -> int:
            for i in range(5):
                await ctx.run(f"model-{i}", ask, f"{n}/{i} {PROMPT}", limit="openai", tokens=716)
            return n

        async with Engine.open(path) as engine:
            await engine.limits.set("openai", rate=f"60/{period:g}s", tokens=f"40000/{period:g}s")
            started = time.time()
            statuses: list[str] = []

            async def one(n: int) -> None:
                statuses.append((await engine.run(agent, n, id=f"fleet-{n}")).status)

            async with anyio.create_task_group() as tg:
                for n in range(invocations):
                    tg.start_soon(one, n)
            ended = time.time()
        served = list(provider.served)
        refused = provider.refused
    # Tokens served in each window of `period` (from the first answer), and the most in any
    # sliding window (checked at every answer).
    windows = []
    at = started
    while at < ended:
        windows.append(sum(t for when, t in served if at <= when < at + period))
        at += period
    busiest = max(sum(t for when, t in served if w <= when < w + period) for w, _ in served)
    full = [w for w in windows[:-1]]  # the last window is cut short by the end of the work
    return {"completed": statuses.count("completed"), "invocations": invocations, "requests": len(served),
            "refused": refused, "refused_share": refused / max(1, len(served) + refused),
            "busiest_window_tokens": busiest, "windows": windows,
            "mean_share_while_waiting": statistics.mean(full) / 40_000 if full else None,
            "seconds": ended - started}


# -- hand-over of a released unit -------------------------------------------------------------------

GRANTED: dict[str, float] = {}
GATES: dict[str, anyio.Event] = {}


async def waiter(ctx: Context, n: int) -> int:
    async def mark() -> int:
        GRANTED[ctx.invocation_id] = time.perf_counter()
        return n

    done = await ctx.run("work", mark)
    # Holds its unit until the benchmark lets it end, so that units pass one at a time and the
    # order of GRANTED is the order the line served (several grantees running at once would
    # record their times in whatever order their tasks happened to run).
    await GATES.setdefault(ctx.invocation_id, anyio.Event()).wait()
    return done


async def _handover(path: str, waiters: int) -> dict[str, Any]:
    from journal import HOST
    from journal.limits import Request

    GRANTED.clear()
    GATES.clear()
    async with Engine.open(path, durability="async") as engine:
        await engine.limits.set("ten", concurrency=10)
        table = engine.store.limits()
        holds = [f"h{i}" for i in range(10)]
        for hid in holds:
            table.acquire(Request(hid, ("ten",), engine.owner, HOST, os.getpid()))
        priorities = {f"w{i:04d}": (i * 7919) % 5 for i in range(waiters)}
        async with anyio.create_task_group() as tg:
            for wid, priority in priorities.items():
                await engine.start(waiter, 0, id=wid, limit="ten", priority=priority)
            tg.start_soon(engine.serve)
            # A serving worker takes at most a window of 64 invocations into the process (the
            # rest wait in the run queue, in claim order), so at most that many stand in line.
            while (await engine.limits.get("ten")).waiting < min(waiters, 64):
                await anyio.sleep(0.05)
            # Give the ten units to the line one at a time, then let the grantees end one at a
            # time, oldest grant first: each ending invocation hands its unit to the next in line,
            # and that hand-over (the gate opened -> the next grantee's first step) is what is timed.
            for hid in holds:
                await engine._limiter.release(hid, ("ten",))
                while len(GRANTED) < holds.index(hid) + 1:
                    await anyio.sleep(0)
            handover_ms: list[float] = []
            for ended in range(waiters):
                wid = sorted(GRANTED, key=GRANTED.__getitem__)[ended]
                opened = time.perf_counter()
                GATES.setdefault(wid, anyio.Event()).set()
                if len(GRANTED) < waiters:
                    while len(GRANTED) < 10 + ended + 1:
                        await anyio.sleep(0.0005)
                    handover_ms.append((max(GRANTED.values()) - opened) * 1000)
            tg.cancel_scope.cancel()
    served = sorted(GRANTED, key=GRANTED.__getitem__)
    expected = sorted(priorities, key=lambda wid: (-priorities[wid], wid))
    return {"waiters": waiters, "handover_ms_p50": statistics.median(handover_ms),
            "in_order": served == expected, "order_mismatches": sum(a != b for a, b in zip(served, expected, strict=False))}


async def _few(ctx: Context, n: int) -> int:
    for i in range(n):
        await ctx.run(f"s{i}", _agents.noop, inline=True, limit="db")
    return n


async def _second_unit(ctx: Context) -> float:
    """Seconds a step waited for the second unit of `db` while the first step holds the first."""
    holding, done = anyio.Event(), anyio.Event()
    waited: list[float] = []

    async def hold() -> int:
        holding.set()
        await done.wait()
        return 0

    async def second() -> None:
        await holding.wait()
        asked = time.perf_counter()
        got = await ctx.run("second", time.perf_counter, limit="db")
        waited.append(got - asked)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(ctx.run, "first", hold, limit="db"))
        tg.start_soon(second)
    return waited[0]


async def _share_wait(path: str, rounds: int) -> dict[str, float]:
    waits: list[float] = []
    async with Engine.open(path, durability="async") as a, Engine.open(path, durability="async") as b:
        await a.limits.set("db", concurrency=2)
        for r in range(rounds):
            await a.run(_few, 3, id=f"a{r}")
            outcome = await b.run(_second_unit, id=f"b{r}")
            waits.append(outcome.result)
    return {"p50_ms": statistics.median(waits) * 1000, "max_ms": max(waits) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", default="w1,fleet,handover")
    parser.add_argument("--period", type=float, default=60.0, help="the provider's window, seconds (60: a minute)")
    parser.add_argument("--invocations", type=int, default=200)
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=500, help="steps of each run of w1-engine")
    parser.add_argument("--pg", action="store_true", help="W1 and the hand-over on PostgreSQL too (a throwaway server)")
    args = parser.parse_args()
    only = set(args.only.split(","))
    parent = tempfile.mkdtemp(prefix="bench-limits-")
    counter = iter(range(10**6))

    def lmdb() -> str:
        return os.path.join(parent, f"s{next(counter)}")

    if "w1" in only:
        lm = w1_pairs(args.reps, lmdb, W1_STEPS)
        print(f"W1 sync LMDB: {statistics.median(lm['plain']):.1f} us/step, with limit= "
              f"{statistics.median(lm['limited']):.1f} us/step, paired ratio median "
              f"{statistics.median(lm['ratio']):.3f}x (target <= 1.15x); ratios {[round(r, 3) for r in lm['ratio']]}")
        if args.pg:
            from .pgserver import PgServer

            server = PgServer(fsync=True).start()
            try:
                pg = w1_pairs(args.reps, server.new_database, 200)
            finally:
                server.stop()
            print(f"W1 sync PostgreSQL: {statistics.median(pg['plain']):.1f} us/step, with limit= "
                  f"{statistics.median(pg['limited']):.1f} us/step, paired ratio median "
                  f"{statistics.median(pg['ratio']):.3f}x (target <= 1.3x); ratios {[round(r, 3) for r in pg['ratio']]}")
    if "w1-engine" in only:
        targets = [("LMDB", lmdb)]
        server = None
        if args.pg:
            from .pgserver import PgServer

            server = PgServer(fsync=True).start()
            targets.append(("PostgreSQL", server.new_database))
        try:
            for label, target in targets:
                out = anyio.run(_w1_one_engine, target(), args.steps, args.reps)
                print(f"W1 sync {label}, one engine, {args.reps} pairs of {args.steps} steps: "
                      f"{statistics.median(out['plain']):.1f} us/step, with limit= "
                      f"{statistics.median(out['limited']):.1f} us/step, paired ratio median "
                      f"{statistics.median(out['ratio']):.3f}x; ratios {[round(r, 3) for r in out['ratio']]}")
        finally:
            if server is not None:
                server.stop()
    if "fleet" in only:
        out = anyio.run(_fleet, lmdb(), args.invocations, args.period)
        print(f"fleet {out['invocations']}x5 at 60 requests, 40000 tokens / {args.period:g}s: "
              f"{out['completed']} completed in {out['seconds']:.1f}s, {out['requests']} requests served, "
              f"{out['refused']} 429s ({out['refused_share']:.2%}); busiest window {out['busiest_window_tokens']} tokens "
              f"(limit 40000); mean share of the limit in full windows "
              f"{out['mean_share_while_waiting']:.0%} (target >= 85%); windows {out['windows']}")
    if "handover" in only:
        out = anyio.run(_handover, lmdb(), args.waiters)
        print(f"hand-over, {out['waiters']} waiters on concurrency 10 (LMDB, one process): p50 "
              f"{out['handover_ms_p50']:.2f} ms (target <= 5 ms); first ten by priority then arrival: "
              f"{out['in_order']}; positions out of that order: {out['order_mismatches']}")
        if args.pg:
            from .pgserver import PgServer

            server = PgServer(fsync=True).start()
            try:
                out = anyio.run(_handover, server.new_database(), args.waiters)
            finally:
                server.stop()
            print(f"hand-over, {out['waiters']} waiters on concurrency 10 (PostgreSQL, one process): p50 "
                  f"{out['handover_ms_p50']:.2f} ms (target <= 20 ms); first ten by priority then arrival: "
                  f"{out['in_order']}; positions out of that order: {out['order_mismatches']}")
    if "share-wait" in only:
        rounds = max(1, args.waiters // 50)
        out = anyio.run(_share_wait, lmdb(), rounds)
        print(f"a waiter in another engine for the unit of a limit's idle share (LMDB): p50 "
              f"{out['p50_ms']:.2f} ms, most {out['max_ms']:.2f} ms")
        if args.pg:
            from .pgserver import PgServer

            server = PgServer(fsync=True).start()
            try:
                out = anyio.run(_share_wait, server.new_database(), rounds)
            finally:
                server.stop()
            print(f"a waiter in another engine for the unit of a limit's idle share (PostgreSQL): p50 "
                  f"{out['p50_ms']:.2f} ms, most {out['max_ms']:.2f} ms")


if __name__ == "__main__":
    main()
