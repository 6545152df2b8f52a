"""`python -m bench.fleet [--postgres] [--only metrics|batch|retain] [N]`: what operating a fleet costs.

- metrics: one scrape (`runtime.metrics.Metrics.exposition`, what `GET /metrics` sends)
  over N invocations (default 100,000), and as the floor measured in the same run, counting
  the same by reading every record (`Store.list`), which is what a scrape would cost without
  the store's counts. Median of 30 scrapes, in ms.
- batch (LMDB only): `retry --check` over N failed runs (default 10,000): each failed
  journal replayed against the fixed code, then forked. Runs per second, of one batch, by
  the wall clock and by the CPU time of the process.
- retain (LMDB only): W2 (50 concurrent invocations of 20 steps, `sync`) on a store holding
  100,000 finished invocations that are due for trimming, with `Engine.retain` trimming them
  meanwhile and, alternately, without it (the baseline). Steps per second, median of 5 each.

One run on a shared machine: treat the figures as noisy.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

import anyio

from journal import LmdbStore, SetStatus, Status, Store, Transition
from journal.testing import creation_op


def _median_ms(fn, rounds: int = 30) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def metrics(store: Store, n: int) -> None:
    from runtime.metrics import Metrics

    for start in range(0, n, 5000):
        store.apply([creation_op(f"inv-{i:07d}", i, at=1_000_000 + i, handler=f"pkg.mod:h{i % 20}")
                     for i in range(start, min(n, start + 5000))])
    store.apply([SetStatus(f"inv-{i:07d}", Transition(Status.FAILED, 2_000_000)) for i in range(0, n, 10)])
    scrape = Metrics(store)
    scrape.exposition()  # (builds the listing index of a store written before it: once)
    indexed = _median_ms(scrape.exposition)

    def by_reading() -> dict:
        counts: dict = {}
        for record in store.list():
            key = (record.handler, record.status)
            counts[key] = counts.get(key, 0) + 1
        return counts

    scanned = _median_ms(by_reading, rounds=5)
    print(f"metrics: {type(store).__name__}, {n:,} invocations: a scrape {indexed:.2f} ms (median of 30); "
          f"counting by reading every record {scanned:.1f} ms ({scanned / indexed:.0f}x)")


async def _fail_all(path: str, n: int) -> None:
    from runtime import Engine

    from . import _fleet_agents as agents

    agents.FIXED = False
    async with Engine.open(path, handlers={"charge": agents.charge}, durability="async") as engine:
        limit = anyio.Semaphore(64)

        async def one(i: int) -> None:
            async with limit:
                await engine.run("charge", i, id=f"order-{i:06d}")

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)


async def _retry_checked(path: str) -> tuple[int, float, float]:
    from runtime import Engine

    from . import _fleet_agents as agents

    agents.FIXED = True
    async with Engine.open(path, handlers={"charge": agents.charge}, durability="async") as engine:
        t, cpu = time.perf_counter(), time.process_time()
        batch = await engine.start_batch("retry", {"status": "failed"}, check=True)
        done = await engine.run_batch(batch.id)
        return done.done, time.perf_counter() - t, time.process_time() - cpu


def batch(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="journal-fleet-bench-") as tmp:
        path = tmp + "/db"
        anyio.run(_fail_all, path, n)
        done, seconds, cpu = anyio.run(_retry_checked, path)
        assert done == n, done
        # The CPU time of this process beside the wall clock: on a machine shared with other
        # work, the wall clock says as much about the others as about the batch.
        print(f"batch: retry --check of {n:,} failed runs on LMDB: {seconds:.1f} s, {n / seconds:,.0f} runs/s; "
              f"CPU {cpu:.1f} s, {n / cpu:,.0f} runs per CPU second")


async def _w2(path: str, retain: bool) -> float:
    from runtime import Engine

    from . import _agents

    async with Engine.open(path, durability="sync") as engine, anyio.create_task_group() as tg:
        if retain:
            tg.start_soon(lambda: engine.retain({Status.COMPLETED: 3600.0}))
        started = time.perf_counter()
        async with anyio.create_task_group() as runs:
            for _ in range(50):
                runs.start_soon(engine.run, _agents.steps, 20)
        elapsed = time.perf_counter() - started
        tg.cancel_scope.cancel()
    return 50 * 20 / elapsed


def retain(old: int = 100_000) -> None:
    alone, trimming = [], []
    for rep in range(5):
        for with_retention in ((False, True) if rep % 2 == 0 else (True, False)):
            with tempfile.TemporaryDirectory(prefix="journal-fleet-bench-") as tmp:
                with LmdbStore(tmp + "/db") as store:
                    for start in range(0, old, 5000):
                        store.apply([creation_op(f"old-{i:07d}", i, at=1_000_000 + i)
                                     for i in range(start, min(old, start + 5000))])
                        store.apply([SetStatus(f"old-{i:07d}", Transition(Status.COMPLETED, 2_000_000))
                                     for i in range(start, min(old, start + 5000))])
                (trimming if with_retention else alone).append(anyio.run(_w2, tmp + "/db", with_retention))
    a, t = statistics.median(alone), statistics.median(trimming)
    print(f"retain: W2 50x20 sync beside {old:,} due invocations: {t:,.0f} steps/s while trimming, "
          f"{a:,.0f} steps/s without ({t / a:.2f}x); medians of 5, alternated")


def main() -> None:
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    n = next((int(a) for a in sys.argv[1:] if a.isdigit()), None)
    if only in (None, "metrics"):
        if "--postgres" in sys.argv:
            from journal import PostgresStore

            from .pgserver import PgServer

            server = PgServer().start()
            try:
                with PostgresStore(server.new_database()) as store:
                    metrics(store, n or 100_000)
            finally:
                server.stop()
        else:
            with tempfile.TemporaryDirectory(prefix="journal-fleet-bench-") as tmp, LmdbStore(tmp + "/db") as store:
                metrics(store, n or 100_000)
    if only in (None, "batch"):
        batch(n or 10_000)
    if only in (None, "retain"):
        retain(n or 100_000)


if __name__ == "__main__":
    main()
