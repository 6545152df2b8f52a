"""Fixtures shared by every test package: a throwaway PostgreSQL server, and the backends.

With CI=true the PostgreSQL tests must run: a missing server is a failure, not a skip.
Elsewhere (a laptop without PostgreSQL) they skip with one line saying why.
"""

import os

import pytest

from bench.pgserver import PgServer, find_bin_dir

pytest_plugins = ["tests.watchdog"]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {reason}; .ci/run installs PostgreSQL with apt-get", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server for the whole run, from the machine's binaries, on a Unix socket."""
    if find_bin_dir() is None:
        _unavailable("PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    server = PgServer().start()
    yield server
    server.stop()


@pytest.fixture
def pg_limit_rules_kept(monkeypatch):
    """The limit rules a PostgreSQL store read once stay fresh for the test. They are read again
    every half second, on a thread: on a slow machine a call a test expects from the event loop
    would otherwise go out from a thread's connection instead."""
    monkeypatch.setattr("journal.backends.postgres._limits.RULES_FOR", 3600.0)


@pytest.fixture
def postgres_url(pg_server):
    """A fresh, empty database on the session's server: its postgresql:// URL."""
    return pg_server.new_database()


BACKENDS = ("memory", "lmdb", "postgres")


class Backend:
    """One backend for a test: `target` names its store (None for memory, which has no
    name), `open()` opens it again (the same store for memory); all are closed at teardown."""

    def __init__(self, kind, request, tmp_path):
        self.kind = kind
        self.target = store_target(kind, request, tmp_path)
        self._memory = None
        self._opened = []

    def open(self, **options):
        from journal import MemoryStore, open_store

        if self.kind == "memory":
            if self._memory is None:
                self._memory = MemoryStore(**options)
            return self._memory
        store = open_store(self.target, **options)
        self._opened.append(store)
        return store

    def close(self):
        for store in self._opened:
            store.close()


def store_target(kind, request, tmp_path):
    """What names a fresh store of `kind`: an LMDB directory, a new PostgreSQL database's URL."""
    if kind == "postgres":
        return request.getfixturevalue("postgres_url")
    if kind == "lmdb":
        return str(tmp_path / "db")
    return None


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    """Every test that takes `backend` (or `store` in tests/journal) runs on each backend."""
    chosen = Backend(request.param, request, tmp_path)
    yield chosen
    chosen.close()


@pytest.fixture(autouse=True)
def _private_state_home(tmp_path_factory, monkeypatch):
    """What the `journal` command notes for this user (`cli/_started_here.py`) goes to a
    directory of the test's own, never to the real home directory."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
