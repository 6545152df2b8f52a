"""A throwaway high-availability PostgreSQL cluster for `python -m bench.failover`: one etcd
and three Patroni nodes (Debian's `patroni` and `etcd-server` packages), all on loopback,
in a temporary directory, removed when stopped.

Patroni runs each PostgreSQL (as the unprivileged `postgres` account when we are root),
keeps the leader key in etcd, and on the leader's death promotes the most advanced
replica; an old leader started again rejoins as a replica, rewound by `pg_rewind`. With
`synchronous=True` the cluster runs `synchronous_mode` and `synchronous_mode_strict`: a
commit returns only once a standby has it, and with no standby left, commits wait.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from typing import Any

from .pgserver import find_bin_dir, free_port

SCOPE = "jpf-bench"


def available() -> str | None:
    """Why the cluster cannot run here, or None if it can."""
    for tool in ("patroni", "etcd"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: apt-get install patroni etcd-server"
    if find_bin_dir() is None:
        return "PostgreSQL is not installed"
    return None


class Node:
    def __init__(self, cluster: PatroniCluster, index: int) -> None:
        self.name = f"node{index}"
        self.dir = os.path.join(cluster.dir, self.name)
        self.api_port, self.pg_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.cluster = cluster
        os.makedirs(self.dir)
        cluster.own(self.dir)
        self.config = os.path.join(self.dir, "patroni.yml")
        with open(self.config, "w") as f:
            json.dump(self._settings(), f)  # JSON is YAML: no YAML writer needed

    def _settings(self) -> dict[str, Any]:
        c = self.cluster
        sync = c.synchronous
        login = {"username": "journal", "password": "journal"}
        return {
            "scope": SCOPE, "name": self.name,
            "restapi": {"listen": f"127.0.0.1:{self.api_port}", "connect_address": f"127.0.0.1:{self.api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{c.etcd_port}"]},
            "log": {"dir": self.dir, "file_num": 2},
            "bootstrap": {
                "dcs": {
                    # A leader that stops renewing its key loses it within `ttl` seconds.
                    "ttl": c.ttl, "loop_wait": 1, "retry_timeout": max(1, (c.ttl - 1) // 2 - 1),
                    "maximum_lag_on_failover": 1 << 20,
                    "synchronous_mode": sync, "synchronous_mode_strict": sync,
                    "postgresql": {
                        "use_pg_rewind": True, "use_slots": True,
                        "parameters": {"wal_log_hints": "on", "full_page_writes": "on", "max_connections": 200,
                                       "max_wal_senders": 10, "max_replication_slots": 10, "wal_keep_size": "256MB",
                                       # Only processes are killed here, never the machine: the
                                       # page cache keeps what fsync would.
                                       "fsync": "off"},
                    },
                },
                "initdb": [{"encoding": "UTF8"}],
                "pg_hba": ["local all all trust", "local replication all trust",
                           "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_port}", "connect_address": f"127.0.0.1:{self.pg_port}",
                "data_dir": os.path.join(self.dir, "data"), "bin_dir": find_bin_dir(),
                "pgpass": os.path.join(self.dir, "pgpass"),
                "authentication": {"superuser": login, "replication": login, "rewind": login},
                "parameters": {"unix_socket_directories": self.dir},
            },
        }

    def start(self) -> None:
        kwargs = {"user": self.cluster.user} if self.cluster.user else {}
        self.proc = subprocess.Popen(["patroni", self.config], stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.dir, "patroni.err"), "ab"), cwd=self.dir,
                                     start_new_session=True, **kwargs)

    def postmaster_pid(self) -> int | None:
        try:
            with open(os.path.join(self.dir, "data", "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """SIGKILL Patroni and its PostgreSQL: the leader's host, as good as gone."""
        pid = self.postmaster_pid()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}{path}", timeout=2) as answer:
            return json.loads(answer.read() or b"null")

    def url(self, dbname: str) -> str:
        return f"postgresql://journal@127.0.0.1:{self.pg_port}/{dbname}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        pid = self.postmaster_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class PatroniCluster:
    """`PatroniCluster(synchronous=True).start()`: etcd and three nodes, a leader elected."""

    def __init__(self, *, synchronous: bool, ttl: int = 8, nodes: int = 3) -> None:
        self.synchronous = synchronous
        self.ttl = ttl
        self.dir = tempfile.mkdtemp(prefix="jpf-patroni-")
        self.user = None
        if os.geteuid() == 0:
            self.user = "postgres" if _has_user("postgres") else "nobody"
        self.own(self.dir)
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.nodes = [Node(self, i) for i in range(nodes)]

    def own(self, path: str) -> None:
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def start(self) -> PatroniCluster:
        data = os.path.join(self.dir, "etcd")
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        self.etcd = subprocess.Popen(
            ["etcd", "--name", "jpf", "--data-dir", data, "--listen-client-urls", client, "--advertise-client-urls",
             client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster",
             f"jpf={peer}", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "etcd.err"), "ab"), start_new_session=True)
        self._until(lambda: _answers(f"{client}/health"), "etcd to answer", 60)
        for node in self.nodes:
            node.start()
        self.wait_healthy(timeout=180)
        return self

    def members(self) -> list[dict[str, Any]]:
        for node in self.nodes:
            try:
                return list(node.api("/cluster")["members"])
            except OSError:
                continue
        return []

    def leader(self) -> Node | None:
        names = [m["name"] for m in self.members() if m.get("role") == "leader" and m.get("state") == "running"]
        return next((n for n in self.nodes if n.name in names), None)

    def healthy(self) -> bool:
        """A running leader, every other node streaming from it, and (synchronous) one of
        them its synchronous standby."""
        members = self.members()
        if len(members) != len(self.nodes):
            return False
        leaders = [m for m in members if m.get("role") == "leader" and m.get("state") == "running"]
        replicas = [m for m in members if m.get("role") != "leader"]
        if len(leaders) != 1 or not all(m.get("state") in ("streaming", "running") and m.get("lag", 0) == 0
                                        for m in replicas):
            return False
        return not self.synchronous or any(m.get("role") == "sync_standby" for m in replicas)

    def wait_healthy(self, timeout: float = 120) -> None:
        self._until(self.healthy, "the cluster to have a leader and streaming replicas", timeout)

    def _until(self, condition: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}; see {self.dir}")
            time.sleep(0.05)  # polling the cluster's REST API: it sends no events

    def url(self, dbname: str) -> str:
        """The three-host URL: libpq keeps the one that takes writes."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return f"postgresql://journal@{hosts}/{dbname}?target_session_attrs=read-write"

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.send_signal(signal.SIGTERM)
            try:
                self.etcd.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.etcd.kill()
                self.etcd.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
