"""`python -m bench.starts [--postgres] [--queued N] [--schedules N]`: what start options
and schedules cost, measured in one run.

- Claims: one worker (concurrency 16) completes 1,000 trivial invocations of priority 1
  while N others of priority 0 wait in the queue, against the same with 100 waiting: the
  invocations per second of each, and their ratio (the issue asks >= 0.9).
- Schedules: N schedules each due at the same instant, fired by one `fire_due` pass with a
  fixed clock: the pass's wall time is the lag of the last tick for one worker (a worker
  looks at least once a second, so the worst lag is about a second more).

Prints medians; the machine it runs on is what it is (say so when quoting).
"""

from __future__ import annotations

import sys
import tempfile
import time

import anyio

from journal import Create, InvocationRecord, Started, Status, Store, digest, encode_entry, encode_value
from runtime import Context, Engine


async def trivial(ctx: Context, n: int) -> int:
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


async def _claims(store: Store, waiting: int) -> float:
    from runtime import handler_path

    handler = handler_path(trivial)
    _fill(store, [f"wait-{i:07d}" for i in range(waiting)], 0, handler)
    urgent = [f"urgent-{i:05d}" for i in range(1000)]
    _fill(store, urgent, 1, handler)
    async with Engine.open(store=store, durability="async", poll_interval=0.01) as engine:
        began = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: engine.serve(concurrency=16))
            while not all(store.get(i).finished for i in urgent[-16:]):
                await anyio.sleep(0.01)
            took = time.perf_counter() - began
            tg.cancel_scope.cancel()
    done = sum(1 for i in urgent if store.get(i).finished)
    return done / took


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


def run(open_store, queued: int, schedules: int) -> None:
    rates = {}
    for waiting in (100, queued):
        store = open_store()
        rates[waiting] = anyio.run(_claims, store, waiting)
        store.close()
        print(f"claims with {waiting:,} waiting: {rates[waiting]:,.0f} invocations/s")
    print(f"ratio {queued:,} / 100 waiting: {rates[queued] / rates[100]:.2f}")
    store = open_store()
    took = anyio.run(_schedules, store, schedules)
    store.close()
    print(f"{schedules:,} schedules due at once, one fire_due pass (the last tick's lag, one worker): {took:.2f} s")


def main() -> None:
    args = sys.argv[1:]
    queued = int(args[args.index("--queued") + 1]) if "--queued" in args else 100_000
    schedules = int(args[args.index("--schedules") + 1]) if "--schedules" in args else 10_000
    if "--postgres" in args:
        from journal import PostgresStore

        from .pgserver import PgServer

        server = PgServer().start()
        try:
            run(lambda: PostgresStore(server.new_database()), queued, schedules)
        finally:
            server.stop()
        return
    from journal import LmdbStore

    with tempfile.TemporaryDirectory(prefix="journal-starts-bench-") as tmp:
        count = iter(range(100))
        run(lambda: LmdbStore(f"{tmp}/db{next(count)}"), queued, schedules)


if __name__ == "__main__":
    main()
