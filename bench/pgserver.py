"""A throwaway PostgreSQL server for the benchmarks and the tests (`tests/conftest.py` imports
it from here, so that no benchmark depends on the test tree).

Started from the machine's binaries (`initdb`, `pg_ctl`) in a temporary directory,
listening only on a Unix socket there, and removed when stopped. PostgreSQL refuses to
run as root, so when we are root the server runs as an unprivileged account (`postgres`
where it exists, otherwise `nobody`) that owns the temporary directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid


def find_bin_dir() -> str | None:
    """The directory holding `initdb` and `pg_ctl`: on PATH, or the newest under /usr/lib/postgresql."""
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(found)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    return os.path.dirname(candidates[-1]) if candidates else None


class PgServer:
    """`PgServer().start()` gives a running server; `url(dbname)` a libpq URI to it; `stop()` removes it."""

    def __init__(self, *, fsync: bool = False) -> None:
        self.fsync = fsync
        self.bin_dir = find_bin_dir()
        self.dir: str | None = None
        self._user: str | None = None

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.bin_dir is not None
        cmd = [os.path.join(self.bin_dir, args[0]), *args[1:]]
        kwargs = {"user": self._user} if self._user else {}
        return subprocess.run(cmd, capture_output=True, text=True, check=True, **kwargs)

    def start(self) -> PgServer:
        if self.bin_dir is None:
            raise FileNotFoundError("initdb not found on PATH or under /usr/lib/postgresql/*/bin")
        self.dir = tempfile.mkdtemp(prefix="journal-pg-")
        if os.geteuid() == 0:
            self._user = next(u for u in ("postgres", "nobody") if _has_user(u))
            entry = pwd.getpwnam(self._user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        data = os.path.join(self.dir, "data")
        try:
            self._run("initdb", "-D", data, "-U", "journal", "--auth=trust", "-E", "UTF8", "--no-sync",
                      "--no-instructions")
            options = f"-k {self.dir} -c listen_addresses='' -c max_connections=200 " + (
                "" if self.fsync else "-c fsync=off -c full_page_writes=off ")
            self._run("pg_ctl", "-D", data, "-l", os.path.join(self.dir, "log"), "-o", options, "-w", "start")
        except subprocess.CalledProcessError as exc:
            log = _read(os.path.join(self.dir, "log"))
            self.stop()
            raise RuntimeError(f"could not start PostgreSQL: {exc.stderr or exc.stdout}\n{log}") from None
        return self

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://journal@/{dbname}?host={self.dir}"

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.dir is None:
            return
        data = os.path.join(self.dir, "data")
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            try:
                self._run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()[-2000:]
    except OSError:
        return ""
