"""Which PostgreSQL driver the store uses: psycopg 3 against asyncpg, measured; and how a
step's statement is best sent from the event loop.

`python -m bench.pg_drivers` starts a throwaway server (fsync on) and times N rounds of
`INSERT ...; COMMIT` with each driver, with `synchronous_commit` on (a WAL flush per
commit) and off (the driver's and server's own cost). asyncpg is not a dependency of
journal: `pip install asyncpg` to run this.

Then it times the store's own step statement (one row, committing by itself, lease
checked) sent three ways from an asyncio task: psycopg's blocking connection on a
thread (a hop each way), psycopg's asyncio connection, and the store's libpq path
(`journal/backends/postgres/_loop.py`).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

N = 300
REPS = 5


def _psycopg(url: str, sync: str) -> float:
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute(f"SET synchronous_commit = {sync}")
        conn.execute("CREATE TABLE IF NOT EXISTS drv (id bigserial PRIMARY KEY, v bytea)")
        conn.commit()
        started = time.perf_counter()
        for _ in range(N):
            conn.execute("INSERT INTO drv (v) VALUES (%s)", (b"x" * 60,))
            conn.commit()
        return (time.perf_counter() - started) / N * 1e6


async def _asyncpg(url: str, sync: str) -> float:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"SET synchronous_commit = {sync}")
        await conn.execute("CREATE TABLE IF NOT EXISTS drv (id bigserial PRIMARY KEY, v bytea)")
        started = time.perf_counter()
        for _ in range(N):
            async with conn.transaction():
                await conn.execute("INSERT INTO drv (v) VALUES ($1)", b"x" * 60)
        return (time.perf_counter() - started) / N * 1e6
    finally:
        await conn.close()


async def _step_paths(url: str) -> dict[str, float]:
    import os

    import psycopg

    from journal import Acquire, InvocationRecord, PostgresStore, Started, Status, encode_entry, encode_value
    from journal.backends.postgres._loop import LoopWriter
    from journal.backends.postgres._rows import fast_append_args, fast_append_sql

    store = PostgresStore(url)
    store.create(InvocationRecord("drv", "bench", Status.PENDING, 1, 1),
                 encode_entry(Started("bench", encode_value(None), 1)))
    store.apply_one(Acquire("drv", "bench", "host", os.getpid(), 3_600_000_000, 1))
    lease = store._fence.fenced(b"drv", 1)
    assert lease is not None  # the claim's lease row, remembered by the fence
    seq = iter(range(1, 10 * N * REPS))

    def row() -> tuple[bytes, bytes, bytes, bytes]:
        return (b"drv\x00" + next(seq).to_bytes(4, "big"), b"x" * 100, b"drv", lease)

    blocking = psycopg.connect(url, autocommit=True)
    aconn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    writer = await LoopWriter.open(url)
    sql = fast_append_sql(1)
    try:
        async def thread() -> None:
            await asyncio.to_thread(lambda: blocking.execute(sql, fast_append_args([row()])).fetchall())

        async def psycopg_async() -> None:
            await (await aconn.execute(sql, fast_append_args([row()]))).fetchall()

        async def libpq() -> None:
            key, data, id_bytes, held = row()
            await writer.append([(id_bytes, int.from_bytes(key[-4:], "big"), data, held)], durable=True)

        timings: dict[str, list[float]] = {}
        for _ in range(REPS):
            for name, send in (("psycopg on a thread (asyncio.to_thread)", thread), ("psycopg asyncio", psycopg_async),
                               ("libpq from the loop", libpq)):
                started = time.perf_counter()
                for _ in range(N):
                    await send()
                timings.setdefault(name, []).append((time.perf_counter() - started) / N * 1e6)
        return {name: statistics.median(values) for name, values in timings.items()}
    finally:
        writer.close()
        await aconn.close()
        blocking.close()
        store.close()


def main() -> None:
    sys.path.insert(0, ".")
    from .pgserver import PgServer

    server = PgServer(fsync=True).start()
    try:
        url = server.url()
        for sync in ("on", "off"):
            p = statistics.median(_psycopg(url, sync) for _ in range(REPS))
            a = statistics.median(asyncio.run(_asyncpg(url, sync)) for _ in range(REPS))
            print(f"INSERT+COMMIT, synchronous_commit={sync}: psycopg {p:.1f} us, asyncpg {a:.1f} us "
                  f"(medians of {REPS} x {N})")
        paths = asyncio.run(_step_paths(server.new_database()))
        print("a step's statement (synchronous_commit=on) sent from an asyncio task: " + ", ".join(
            f"{name} {us:.1f} us" for name, us in paths.items()) + f" (medians of {REPS} x {N})")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
