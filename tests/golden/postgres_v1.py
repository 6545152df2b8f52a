"""Loading the format-1 PostgreSQL golden store (`postgres-v1/`) into a throwaway server."""

import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
DUMP = os.path.join(HERE, "postgres-v1", "store.sql")


def load_golden(pg_server) -> str:
    """A new database holding the golden store, loaded with psql as an operator would: its URL."""
    url = pg_server.new_database()
    psql = os.path.join(pg_server.bin_dir, "psql")
    if not os.path.exists(psql):
        psql = shutil.which("psql") or psql
    subprocess.run([psql, "-q", "-X", "-v", "ON_ERROR_STOP=1", "-o", os.devnull, "-d", url, "-f", DUMP],
                   check=True, capture_output=True, text=True)
    return url
