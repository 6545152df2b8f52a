"""The ordered key-value tables (`journal.Tables`), over every backend (the `store` fixture)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from journal import LmdbStore, PostgresStore, TablePut
from journal.testing import TablesContract

from ..waiting import wait_while_alive

KEYS = [b"a", b"a\x00", b"a\x00\x01", b"a\x01", b"a\xff", b"a\xff\xff", b"ab", b"b", b"\xff\xff"]


@pytest.mark.usefixtures("backend")
class TestEveryBackend(TablesContract):
    """`journal.testing`'s contract for the `Tables` protocol, over each backend."""

    def make_store(self, tmp_path, request):
        return request.getfixturevalue("backend").open()


def fill(store, table="t", keys=KEYS):
    store.table_write([TablePut(table, k, b"v" + k) for k in reversed(keys)])


def test_tables_survive_reopening_on_postgresql(postgres_url):
    with PostgresStore(postgres_url) as store:
        fill(store)
    with PostgresStore(postgres_url) as store:
        assert [k for k, _ in store.table_scan("t")] == sorted(KEYS)
        assert store.table_scan("never_written") == []


def test_tables_survive_reopening(tmp_path):
    with LmdbStore(tmp_path / "db") as store:
        fill(store)
    with LmdbStore(tmp_path / "db") as store:
        assert [k for k, _ in store.table_scan("t")] == sorted(KEYS)
    with LmdbStore(tmp_path / "db", readonly=True) as store:
        assert store.table_get("t", b"ab") == b"vab"
        assert store.table_scan("never_written") == []


def test_tables_do_not_disturb_the_journal(tmp_path):
    from journal import check
    with LmdbStore(tmp_path / "db") as store:
        fill(store, "checkpoints")
        assert store.list() == []
        assert check(store) == []


def test_a_killed_writer_leaves_whole_batches(tmp_path):
    """SIGKILL a process writing 2-key batches: each batch is there entirely or not at all."""
    path = tmp_path / "db"
    ready = tmp_path / "ready"
    script = textwrap.dedent(f"""
        import pathlib
        from journal import LmdbStore, TablePut
        store = LmdbStore({str(path)!r})
        i = 0
        while True:
            store.table_write([TablePut("t", b"a%08d" % i, b"x" * 2000), TablePut("t", b"b%08d" % i, b"y")],
                              durable=i % 2 == 0)
            i += 1
            if i == 200:
                pathlib.Path({str(ready)!r}).write_text("go")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_while_alive(proc, ready.exists, "the writer reached 200 batches")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with LmdbStore(path) as store:
        a = [k[1:] for k, _ in store.table_scan("t", b"a")]
        b = [k[1:] for k, _ in store.table_scan("t", b"b")]
    assert len(a) >= 200
    assert a == b
