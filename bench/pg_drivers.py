"""Which PostgreSQL driver the store uses: psycopg 3 against asyncpg, measured.

`python -m bench.pg_drivers` starts a throwaway server (fsync on) and times N rounds of
`INSERT ...; COMMIT` with each driver, with `synchronous_commit` on (a WAL flush per
commit) and off (the driver's and server's own cost). asyncpg is not a dependency of
journal: `pip install asyncpg` to run this.
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
    finally:
        server.stop()


if __name__ == "__main__":
    main()
