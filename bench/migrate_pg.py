"""`python -m bench.migrate_pg [--entries N] [--runs R]`: how long `journal migrate` takes
to convert a PostgreSQL store of format 1 to format 2.

Each run loads the format-1 golden store (`tests/golden/postgres-v1/store.sql`) into a new
database of a throwaway server (`bench/pgserver.py`, fsync off), adds N entries of 128
bytes to it in format 1, and times `journal migrate` as a process, from start to exit.
Prints every run, the median wall time, and the rows copied per second at the median.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from .pgserver import PgServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DUMP = os.path.join(ROOT, "tests", "golden", "postgres-v1", "store.sql")


def _format_1_store(server: PgServer, entries: int) -> str:
    import psycopg

    url = server.new_database()
    assert server.bin_dir is not None
    psql = os.path.join(server.bin_dir, "psql")
    psql = psql if os.path.exists(psql) else (shutil.which("psql") or psql)
    subprocess.run([psql, "-q", "-X", "-v", "ON_ERROR_STOP=1", "-o", os.devnull,
                    "-d", url, "-f", DUMP], check=True, capture_output=True)
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO journal.entries (k, v) SELECT 'bulk'::bytea || '\\x00'::bytea || int4send(g), "
                     "decode(repeat('ab', 128), 'hex') FROM generate_series(0, %s) g", (entries - 1,))
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server = PgServer().start()
    try:
        times = []
        for run in range(args.runs):
            url = _format_1_store(server, args.entries)
            began = time.perf_counter()
            subprocess.run([sys.executable, "-m", "cli", "migrate", "--db", url, "--json"], check=True,
                           capture_output=True, cwd=ROOT)
            times.append(time.perf_counter() - began)
            print(f"run {run + 1}: {times[-1]:.2f} s")
        median = statistics.median(times)
        print(f"journal migrate, {args.entries:,} entries: median {median:.2f} s "
              f"({args.entries / median:,.0f} rows/s)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
