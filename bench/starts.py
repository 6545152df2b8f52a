"""`python -m bench.starts [--postgres [--dbos]] [--queued N] [--rounds R] [--schedules N]`:
what start options and schedules cost, measured in one run.

- Claims: one worker (concurrency 16) completes 1,000 trivial invocations of priority 1
  while N others of priority 0 wait in the queue, against the same with 100 waiting. Both
  stores are filled once; each of R rounds (default 5) adds 1,000 urgent invocations to
  each, tops its waiting ones up to their count, and times their completion, the two
  stores in turn (which goes first alternates). Prints each round, the median invocations
  per second of each, and the ratio of the medians (the issue asks >= 0.9).
- With `--dbos` (PostgreSQL; needs `pip install 'dbos>=1.0'`): then the same claims by
  DBOS Transact's queue on the same server (`bench/_dbos_queue.py`): one executor with
  worker concurrency 16 completing 1,000 workflows of priority 1 while N of priority 10
  wait on the queue, against 100 waiting; each round's workflows are enqueued one by one
  and timed from the first enqueue, as journal's are started by one process.
- Schedules: N schedules each due at the same instant, fired by one `fire_due` pass with a
  fixed clock: the pass's wall time is the lag of the last tick for one worker (a worker
  looks at least once a second, so the worst lag is about a second more).

The machine it runs on is what it is (say so when quoting).
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

import anyio

from journal import Create, InvocationRecord, Started, Status, Store, digest, encode_entry, encode_value
from runtime import Context, Engine

URGENT_DONE = [0]  # urgent invocations whose handler has returned, in this process


async def trivial(ctx: Context, n: int) -> int:
    if ctx.invocation_id.startswith("urgent-"):
        URGENT_DONE[0] += 1
    return n


def _fill(store: Store, ids: list[str], priority: int, handler: str) -> None:
    raw = encode_value(1)
    d = digest(bytes(raw))
    for start in range(0, len(ids), 2000):
        ops = []
        for i in ids[start:start + 2000]:
            at = time.time_ns() // 1000
            record = InvocationRecord(i, handler, Status.PENDING, at, at, None, d, priority=priority)
            ops.append(Create(record, encode_entry(Started(handler, raw, at, None, d))))
        store.apply(ops)


async def _claims(store: Store, handler: str, urgent: list[str]) -> tuple[float, float]:
    """Invocations per second, and this process's CPU time per invocation (µs)."""
    _fill(store, urgent, 1, handler)
    async with Engine.open(store=store, durability="async", poll_interval=0.01) as engine:
        engine.register(trivial)  # this very function (and its counter), not a copy loaded from its file
        URGENT_DONE[0] = 0
        began, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: engine.serve(concurrency=16))
            # Counted by the handlers rather than read from the store: a read is a blocking call
            # on this loop, and on PostgreSQL sixteen of them every 10 ms would be round trips
            # inside the loop being timed (the figures came out the same either way).
            while URGENT_DONE[0] < len(urgent):
                await anyio.sleep(0.005)
            while not all(store.get(i).finished for i in urgent[-16:]):  # their last writes
                await anyio.sleep(0.005)
            took, cpu = time.perf_counter() - began, time.process_time() - cpu
            tg.cancel_scope.cancel()
    done = sum(1 for i in urgent if store.get(i).finished)
    return done / took, cpu / done * 1e6


def _top_up(store: Store, waiting: int, handler: str, fresh: Iterator[int]) -> None:
    """As many priority-0 invocations waiting as asked: a round's worker takes some of them
    once the urgent ones are done, before it is stopped."""
    missing = waiting - len(store.ready(waiting))
    _fill(store, [f"wait-{next(fresh):07d}" for _ in range(missing)], 0, handler)


async def _schedules(store: Store, n: int) -> float:
    import datetime

    from runtime import handler_path

    t0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC).timestamp()
    now = [t0]
    async with Engine.open(store=store, durability="async", clock=lambda: now[0]) as engine:
        for i in range(n):
            await engine.schedules.add(f"s{i:05d}", handler_path(trivial), every=60, input=i)
        now[0] = t0 + 60
        began = time.perf_counter()
        started = await engine.schedules.fire_due()
        took = time.perf_counter() - began
    assert len(started) == n, len(started)
    return took


def run(open_store, queued: int, rounds: int, schedules: int) -> None:
    from runtime import handler_path

    handler = handler_path(trivial)
    stores = {waiting: open_store() for waiting in (100, queued)}
    fresh = itertools.count()
    for waiting, store in stores.items():
        began = time.perf_counter()
        _top_up(store, waiting, handler, fresh)
        print(f"filled {waiting:,} waiting in {time.perf_counter() - began:.1f} s")
    rates: dict[int, list[float]] = {waiting: [] for waiting in stores}
    cpus: dict[int, list[float]] = {waiting: [] for waiting in stores}
    for r in range(rounds):
        order = list(stores) if r % 2 == 0 else list(reversed(stores))
        for waiting in order:
            store = stores[waiting]
            _top_up(store, waiting, handler, fresh)
            urgent = [f"urgent-{r:02d}-{i:05d}" for i in range(1000)]
            rate, cpu = anyio.run(_claims, store, handler, urgent)
            rates[waiting].append(rate)
            cpus[waiting].append(cpu)
        print(f"round {r + 1}: " + ", ".join(f"{w:,} waiting {rates[w][-1]:,.0f}/s ({cpus[w][-1]:,.0f} µs CPU each)"
                                             for w in stores) + f", ratio {rates[queued][-1] / rates[100][-1]:.2f}")
    for store in stores.values():
        store.close()
    medians = {w: statistics.median(v) for w, v in rates.items()}
    cpu = {w: statistics.median(v) for w, v in cpus.items()}
    for waiting, median in medians.items():
        print(f"claims with {waiting:,} waiting: median {median:,.0f} invocations/s, "
              f"{cpu[waiting]:,.0f} µs of this process's CPU each, over {rounds} rounds")
    print(f"ratio of the medians, {queued:,} / 100 waiting: {medians[queued] / medians[100]:.2f} "
          f"(CPU per invocation: {cpu[queued] / cpu[100]:.2f}; the rounds' own ratios: median "
          f"{statistics.median(q / h for q, h in zip(rates[queued], rates[100], strict=True)):.2f})")
    if schedules:
        store = open_store()
        took = anyio.run(_schedules, store, schedules)
        store.close()
        print(f"{schedules:,} schedules due at once, one fire_due pass (the last tick's lag, one worker): {took:.2f} s")


def _dbos(url: str, *what: object) -> str:
    """`bench._dbos_queue` in a process of its own (DBOS is a singleton): its output."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "bench._dbos_queue", url, *map(str, what)], capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise SystemExit(f"DBOS failed: {done.stderr[-2000:]}")
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def dbos_claims(new_database, queued: int, rounds: int) -> None:
    """DBOS's queue doing the claims above, on the same server: 1,000 workflows of a higher
    priority completed by one executor (worker concurrency 16) while 100 or `queued` others
    wait on the queue, the two databases in turn."""
    import json

    urls = {waiting: new_database() for waiting in (100, queued)}
    for waiting, url in urls.items():
        began = time.perf_counter()
        _dbos(url, "fill", waiting)
        print(f"DBOS: filled {waiting:,} waiting in {time.perf_counter() - began:.1f} s")
    rates: dict[int, list[float]] = {waiting: [] for waiting in urls}
    for r in range(rounds):
        for waiting in (list(urls) if r % 2 == 0 else list(reversed(urls))):
            url = urls[waiting]
            missing = waiting - int(_dbos(url, "count", 0))
            if missing > 0:
                _dbos(url, "fill", missing)
            rates[waiting].append(json.loads(_dbos(url, "round", 1000))["per_s"])
        print(f"DBOS round {r + 1}: " + ", ".join(f"{w:,} waiting {rates[w][-1]:,.0f}/s" for w in urls)
              + f", ratio {rates[queued][-1] / rates[100][-1]:.2f}")
    medians = {w: statistics.median(v) for w, v in rates.items()}
    for waiting, median in medians.items():
        print(f"DBOS queue with {waiting:,} waiting: median {median:,.0f} workflows/s over {rounds} rounds")
    print(f"DBOS ratio of the medians, {queued:,} / 100 waiting: {medians[queued] / medians[100]:.2f}")


def main() -> None:
    args = sys.argv[1:]
    queued = int(args[args.index("--queued") + 1]) if "--queued" in args else 100_000
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 5
    schedules = int(args[args.index("--schedules") + 1]) if "--schedules" in args else 10_000
    if "--postgres" in args:
        from journal import PostgresStore

        from .pgserver import PgServer

        server = PgServer().start()
        try:
            run(lambda: PostgresStore(server.new_database()), queued, rounds, schedules)
            if "--dbos" in args:
                dbos_claims(server.new_database, queued, rounds)
        finally:
            server.stop()
        return
    from journal import LmdbStore

    with tempfile.TemporaryDirectory(prefix="journal-starts-bench-") as tmp:
        count = iter(range(100))
        run(lambda: LmdbStore(f"{tmp}/db{next(count)}"), queued, rounds, schedules)


if __name__ == "__main__":
    main()
