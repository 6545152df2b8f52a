"""`python -m bench.schedules [--postgres] [--schedules N] [--minutes M] [--workers W]
[--overlap POLICY]`: N schedules (default 10,000) each firing every minute, fired and run
by W `journal worker` processes (default 2) for M whole minutes (default 3).

Prints the ticks in the window that have no invocation (missed), the invocations that are
not the one of a whole-minute tick (doubled: a tick's id is unique in the store, so a tick
started twice would have to show as such an invocation), the ticks the schedules counted
skipped, and the tick lag (invocation created - tick time; an invocation's creation time
is read as its transaction begins) at the median, p99 and worst; then how many of the
invocations were still unfinished when the workers stopped, 30 s after the last tick.

With the default overlap policy, `skip`, a tick whose previous tick's invocation has not
finished (still queued, or running) is skipped and counted: how many depends on how fast
the workers *run* invocations, not on the firing. `--overlap allow-all` starts every tick
whatever the previous one's state, so that every tick must have its invocation: the
firing alone is measured.

The machine it runs on is what it is (say so when quoting).
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import anyio

from journal import Status, Store, iso_from_us
from runtime import Context, Engine

HANDLER = "tick"


async def tick(ctx: Context, n: int) -> int:
    return n


async def _add(store: Store, n: int, overlap: str) -> None:
    async with Engine.open(store=store, durability="async") as engine:
        for i in range(n):
            await engine.schedules.add(f"s{i:05d}", HANDLER, every=60, input=i, overlap=overlap)


def _workers(db: str, count: int) -> list[subprocess.Popen[bytes]]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    command = [sys.executable, "-m", "cli", "worker", "--db", db, "--concurrency", "32",
               "--handler", f"{HANDLER}=bench.schedules:tick"]
    return [subprocess.Popen(command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for _ in range(count)]


def run(db: str, open_store, n: int, minutes: int, workers: int, overlap: str = "skip") -> None:
    store = open_store()
    began = time.perf_counter()
    anyio.run(_add, store, n, overlap)
    print(f"{n:,} schedules added in {time.perf_counter() - began:.1f} s")
    procs = _workers(db, workers)
    try:
        # The window: whole minutes from the first one at least 20 s after the workers start.
        first = math.ceil((time.time() + 20) / 60) * 60
        last = first + (minutes - 1) * 60
        while time.time() < last + 30:  # the last tick, and time for it to be fired
            if any(p.poll() is not None for p in procs):
                raise SystemExit(f"a worker stopped: {procs[0].stderr.read().decode()[-2000:] if procs[0].stderr else ''}")
            time.sleep(1)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=120)
    ticks = [(first + 60 * m) * 1_000_000 for m in range(minutes)]
    created: dict[str, int] = {}
    unfinished = 0
    for status in Status:
        for invocation_id in store.ids(status):
            record = store.get(invocation_id)
            if record is not None:
                created[invocation_id] = record.created_at
                unfinished += not record.finished
    missed, lags = 0, []
    for i in range(n):
        for t in ticks:
            at = created.get(f"s{i:05d}@{iso_from_us(t)}")
            if at is None:
                missed += 1
            else:
                lags.append((at - t) / 1e6)
    # An id names its tick and is unique in the store, so a tick cannot have two invocations
    # under its id; one fired twice (or at a wrong time) would be an invocation whose id is
    # not that of a whole minute.
    doubled = sum(1 for i in created if not (i.startswith("s") and i.endswith(":00Z")))
    skipped = sum(s.skipped for s in store.schedules())
    lags.sort()
    store.close()
    print(f"{workers} workers, overlap {overlap}, {minutes} minutes ({iso_from_us(ticks[0])} to "
          f"{iso_from_us(ticks[-1])}): {n * len(ticks):,} ticks, {missed} with no invocation, {doubled} doubled, "
          f"{skipped} counted skipped by the schedules (missed: {missed - skipped})")
    if lags:
        print(f"tick lag: median {statistics.median(lags):.2f} s, p99 {lags[int(0.99 * (len(lags) - 1))]:.2f} s, "
              f"worst {lags[-1]:.2f} s")
    print(f"{len(created):,} invocations, {unfinished:,} of them unfinished when the workers stopped")


def main() -> None:
    args = sys.argv[1:]

    def option(name: str, default: int) -> int:
        return int(args[args.index(name) + 1]) if name in args else default

    n, minutes, workers = option("--schedules", 10_000), option("--minutes", 3), option("--workers", 2)
    overlap = args[args.index("--overlap") + 1] if "--overlap" in args else "skip"
    if "--postgres" in args:
        from journal import PostgresStore

        from .pgserver import PgServer

        server = PgServer().start()
        try:
            url = server.new_database()
            run(url, lambda: PostgresStore(url), n, minutes, workers, overlap)
        finally:
            server.stop()
        return
    from journal import LmdbStore

    with tempfile.TemporaryDirectory(prefix="journal-schedules-bench-") as tmp:
        run(f"{tmp}/db", lambda: LmdbStore(f"{tmp}/db"), n, minutes, workers, overlap)


if __name__ == "__main__":
    main()
