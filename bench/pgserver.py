"""Throwaway PostgreSQL servers for the benchmarks and the tests (`tests/conftest.py` imports
them from here, so that no benchmark depends on the test tree).

Started from the machine's binaries (`initdb`, `pg_ctl`) in a temporary directory,
listening on a Unix socket there (and, when asked, on a TCP address), and removed when
stopped. PostgreSQL refuses to run as root, so when we are root the server runs as an
unprivileged account (`postgres` where it exists, otherwise `nobody`) that owns the
temporary directory.

Besides a lone server, the fault tests and `python -m bench.failover` need what a
production database goes through: a primary with a streaming standby (`standby_of`,
made by `pg_basebackup -R`), synchronous replication (`synchronous`), a postmaster killed
outright (`kill`), an immediate restart (`restart`), a promotion (`promote`), and an old
primary brought back as a standby of the new one (`rejoin`, by `pg_rewind`). Each server
keeps its settings in its own `postgresql.conf`, so that it comes back the same after any
of them.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid


def find_bin_dir() -> str | None:
    """The directory holding `initdb` and `pg_ctl`: on PATH, or the newest under /usr/lib/postgresql."""
    found = shutil.which("initdb")
    if found:  # a link on PATH (Debian's /usr/local/bin/initdb): the others sit beside its target
        return os.path.dirname(os.path.realpath(found))
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    return os.path.dirname(candidates[-1]) if candidates else None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the kernel's choice, so no two callers collide)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class PgServer:
    """`PgServer().start()` gives a running server; `url(dbname)` a libpq URI to it; `stop()` removes it.

    `listen` ("127.0.0.1", or an address inside `netns`) makes it listen on TCP too, on
    `port` (a free one by default); `netns` runs it inside that network namespace;
    `settings` are written to its `postgresql.conf`."""

    def __init__(self, *, fsync: bool = False, listen: str = "", port: int | None = None,
                 netns: str | None = None, settings: dict[str, str] | None = None, name: str = "journal-pg") -> None:
        self.fsync = fsync
        self.listen = listen
        self.port = port if port is not None else (free_port(listen) if listen and netns is None else 5432)
        self.netns = netns
        self.settings = dict(settings or {})
        self.name = name
        self.bin_dir = find_bin_dir()
        self.dir: str | None = None
        self._user: str | None = None

    # -- commands ---------------------------------------------------------------------------

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self.bin_dir is not None
        cmd = [os.path.join(self.bin_dir, args[0]), *args[1:]]
        kwargs = {}
        if self.netns is not None:
            # Into the namespace as root, then down to the server's account.
            cmd = ["ip", "netns", "exec", self.netns, *(["setpriv", f"--reuid={self._user}",
                   f"--regid={self._user}", "--init-groups"] if self._user else []), *cmd]
        elif self._user:
            kwargs["user"] = self._user
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120, **kwargs)

    @property
    def data(self) -> str:
        assert self.dir is not None
        return os.path.join(self.dir, "data")

    def _make_dir(self) -> None:
        if self.bin_dir is None:
            raise FileNotFoundError("initdb not found on PATH or under /usr/lib/postgresql/*/bin")
        self.dir = tempfile.mkdtemp(prefix=f"{self.name}-")
        if os.geteuid() == 0:
            self._user = next(u for u in ("postgres", "nobody") if _has_user(u))
            entry = pwd.getpwnam(self._user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)

    def _conf(self) -> dict[str, str]:
        """What this server's `postgresql.conf` says last (later lines win, so a standby's
        own lines override those it copied from its primary)."""
        conf = {
            "unix_socket_directories": f"'{self.dir}'",
            "listen_addresses": f"'{self.listen}'",
            "port": str(self.port),
            "max_connections": "200",
            # A primary's streaming standbys, and `pg_rewind` after a failover.
            "wal_level": "replica", "max_wal_senders": "10", "wal_log_hints": "on",
            "hot_standby": "on", "wal_keep_size": "256MB",
        }
        if not self.fsync:  # (`pg_rewind` needs full_page_writes: a failover's settings turn it on)
            conf |= {"fsync": "off", "full_page_writes": "off"}
        return conf | self.settings

    def _write_conf(self) -> None:
        lines = "".join(f"{k} = {v}\n" for k, v in self._conf().items())
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n# throwaway server (bench/pgserver.py)\n" + lines)
        with open(os.path.join(self.data, "pg_hba.conf"), "a") as f:
            # initdb trusts local sockets; addresses inside a test's namespaces are trusted too.
            f.write("host all all 0.0.0.0/0 trust\nhost replication all 0.0.0.0/0 trust\n")

    def start(self) -> PgServer:
        self._make_dir()
        try:
            self._run("initdb", "-D", self.data, "-U", "journal", "--auth=trust", "-E", "UTF8", "--no-sync",
                      "--no-instructions")
            self._write_conf()
            self.start_again()
        except (subprocess.CalledProcessError, RuntimeError) as exc:
            self.stop()
            raise RuntimeError(f"could not start PostgreSQL: {exc}") from None
        return self

    @classmethod
    def standby_of(cls, primary: PgServer, **options: object) -> PgServer:
        """A streaming standby of `primary`, from `pg_basebackup -R`, started and caught up."""
        options = {"settings": primary.settings, **options}
        standby = cls(fsync=primary.fsync, **options)  # type: ignore[arg-type]
        standby._make_dir()
        try:
            standby._run("pg_basebackup", "-D", standby.data, "-R", "-X", "stream", "-c", "fast",
                         "-h", str(primary.dir), "-p", str(primary.port), "-U", "journal")
            standby._write_conf()
            standby.start_again()
        except (subprocess.CalledProcessError, RuntimeError) as exc:
            standby.stop()
            raise RuntimeError(f"could not start the standby: {exc}") from None
        return standby

    def start_again(self) -> None:
        """Start the server on its data directory (after `kill`, `stop_server`, `rejoin`)."""
        try:
            self._run("pg_ctl", "-D", self.data, "-l", os.path.join(str(self.dir), "log"), "-w", "-t", "60", "start")
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"pg_ctl start: {exc.stderr or exc.stdout}\n{self.log()}") from None

    def restart(self, mode: str = "immediate") -> None:
        """`pg_ctl restart -m MODE`: every session ends; `immediate` is a crash and recovery."""
        # (`-l`: the new postmaster writes there, not into our pipes, which would stay open.)
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(str(self.dir), "log"), "-m", mode, "-w", "-t", "60",
                  "restart")

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data directory."""
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop", check=False)

    def postmaster_pid(self) -> int | None:
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would, and wait until its sessions are gone too
        (each backend exits when it sees its postmaster die)."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (_backends_of(self.data) or pid_running(pid)) and time.monotonic() < deadline:
            time.sleep(0.01)  # sampling the process table: the kernel gives no event for it
        # A crash leaves these behind. A postmaster's parent that has not reaped it yet leaves
        # a zombie with its pid, which a new postmaster would take for a live one.
        for left in (os.path.join(self.data, "postmaster.pid"),
                     os.path.join(str(self.dir), f".s.PGSQL.{self.port}.lock")):
            try:
                os.unlink(left)
            except FileNotFoundError:
                pass

    def promote(self) -> None:
        """`pg_ctl promote`: a standby becomes a primary, waiting until it accepts writes."""
        self._run("pg_ctl", "-D", self.data, "-w", "-t", "60", "promote")

    def rejoin(self, primary: PgServer) -> None:
        """Bring this (stopped or killed) old primary back as a standby of `primary`: its
        diverging WAL rewound by `pg_rewind`, then started in recovery, following `primary`."""
        self.stop_server("immediate")
        done = self._run("pg_rewind", "-D", self.data, "--source-server",
                  f"host={primary.dir} port={primary.port} user=journal dbname=postgres", check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pg_rewind: {done.stderr or done.stdout}")
        with open(os.path.join(self.data, "standby.signal"), "w"):
            pass
        with open(os.path.join(self.data, "postgresql.auto.conf"), "a") as f:
            f.write(f"primary_conninfo = 'host={primary.dir} port={primary.port} user=journal'\n"
                    "synchronous_standby_names = ''\n")
        self.start_again()

    def synchronous(self, on: bool = True) -> None:
        """Synchronous replication to any standby (`synchronous_standby_names = '*'`), once
        one is streaming; with `on` False, commits stop waiting for standbys."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = " + ("'*'" if on else "''"))
            conn.execute("SELECT pg_reload_conf()")
            if not on:
                return
            deadline = time.monotonic() + 60
            while conn.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").fetchone()[0] < 1:
                if time.monotonic() > deadline:
                    raise RuntimeError("no standby became synchronous within 60 s")
                time.sleep(0.01)  # polling the server's view: it sends no event for it

    def is_primary(self) -> bool:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            return not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]

    # -- addresses --------------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        """Over the Unix socket (which no network namespace separates)."""
        return f"postgresql://journal@/{dbname}?host={self.dir}&port={self.port}"

    def tcp_url(self, dbname: str = "postgres") -> str:
        assert self.listen, "this server listens on its Unix socket only"
        return f"postgresql://journal@{self.listen}:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        return self.url(self.create_database())

    def create_database(self) -> str:
        """A fresh, empty database; its name."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def log(self) -> str:
        return _read(os.path.join(str(self.dir), "log"))

    def stop(self) -> None:
        if self.dir is None:
            return
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            try:
                self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


def _backends_of(data: str) -> list[int]:
    """Processes still running a server on `data` (the postmaster and its children)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue  # a zombie holds nothing
        if data.encode() in cmdline or (b"postgres:" in cmdline and _cwd(entry) == data):
            found.append(int(entry))
    return found


def pid_running(pid: int) -> bool:
    """Whether `pid` is a process that is not a zombie (a zombie runs nothing, though a signal
    to it succeeds)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _cwd(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()[-4000:]
    except OSError:
        return ""
