"""The ordered key-value tables (`journal.Tables`), over every backend (the `store` fixture)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from journal import LmdbStore, MemoryStore, PostgresStore, TableDelete, TableDeletePrefix, TablePut, Tables
from journal.errors import StoreError

from ..waiting import wait_while_alive

KEYS = [b"a", b"a\x00", b"a\x00\x01", b"a\x01", b"a\xff", b"a\xff\xff", b"ab", b"b", b"\xff\xff"]


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def store(request, tmp_path):
    """Every test of the protocol runs against each backend that offers it."""
    if request.param == "memory":
        s = MemoryStore()
    elif request.param == "lmdb":
        s = LmdbStore(tmp_path / "db")
    else:
        s = PostgresStore(request.getfixturevalue("postgres_url"))
    yield s
    s.close()


def fill(store, table="t", keys=KEYS):
    store.table_write([TablePut(table, k, b"v" + k) for k in reversed(keys)])


def test_every_store_offers_the_protocol(store):
    assert isinstance(store, Tables)


def test_get_returns_what_was_put_and_none_for_the_missing(store):
    assert store.table_get("t", b"k") is None
    store.table_write([TablePut("t", b"k", b"1")])
    assert store.table_get("t", b"k") == b"1"
    store.table_write([TablePut("t", b"k", b"2")])
    assert store.table_get("t", b"k") == b"2"


def test_put_without_overwrite_keeps_the_first_value(store):
    store.table_write([TablePut("t", b"k", b"1"), TablePut("t", b"k", b"2", overwrite=False)])
    assert store.table_get("t", b"k") == b"1"
    store.table_write([TablePut("t", b"n", b"3", overwrite=False)])
    assert store.table_get("t", b"n") == b"3"


def test_scan_is_in_bytewise_key_order_within_the_prefix(store):
    fill(store)
    assert [k for k, _ in store.table_scan("t")] == sorted(KEYS)
    assert [k for k, _ in store.table_scan("t", b"a\x00")] == [b"a\x00", b"a\x00\x01"]
    assert [k for k, _ in store.table_scan("t", b"a\xff")] == [b"a\xff", b"a\xff\xff"]
    assert [v for _, v in store.table_scan("t", b"b")] == [b"vb"]
    assert store.table_scan("t", b"c") == []


@pytest.mark.parametrize("prefix", [b"", b"a", b"a\x00", b"a\xff", b"\xff", b"\xff\xff", b"zz", b"0"])
def test_reverse_scan_is_the_forward_scan_reversed(store, prefix):
    fill(store)
    forward = store.table_scan("t", prefix)
    assert store.table_scan("t", prefix, reverse=True) == forward[::-1]


def test_start_is_inclusive_in_both_directions(store):
    fill(store)
    assert [k for k, _ in store.table_scan("t", b"a", start=b"a\x01")] == [b"a\x01", b"ab", b"a\xff", b"a\xff\xff"]
    assert [k for k, _ in store.table_scan("t", b"a", start=b"a\x01", reverse=True)] == [
        b"a\x01", b"a\x00\x01", b"a\x00", b"a"]
    # A start between keys: backwards begins at the key just below it.
    assert [k for k, _ in store.table_scan("t", b"a", start=b"a\x02", reverse=True, limit=2)] == [b"a\x01", b"a\x00\x01"]


def test_limit_counts_items_in_scan_order(store):
    fill(store)
    assert [k for k, _ in store.table_scan("t", b"a", limit=2)] == [b"a", b"a\x00"]
    assert [k for k, _ in store.table_scan("t", b"a", reverse=True, limit=1)] == [b"a\xff\xff"]
    assert store.table_scan("t", limit=0) == []


def test_tables_are_separate_from_each_other(store):
    fill(store, "one")
    store.table_write([TablePut("two", b"a", b"other")])
    assert store.table_get("one", b"a") == b"va"
    assert store.table_scan("two") == [(b"a", b"other")]
    assert store.table_scan("three") == []


def test_a_batch_deletes_keys_and_prefixes_in_order(store):
    fill(store)
    store.table_write([
        TableDeletePrefix("t", b"a\x00"),
        TableDelete("t", b"b"),
        TableDelete("t", b"missing"),
        TablePut("t", b"a\x00\x02", b"new"),  # after the prefix delete: it stays
    ])
    assert [k for k, _ in store.table_scan("t")] == [b"a", b"a\x00\x02", b"a\x01", b"ab", b"a\xff", b"a\xff\xff", b"\xff\xff"]
    store.table_write([TableDeletePrefix("t", b"")])
    assert store.table_scan("t") == []


def test_a_bad_batch_changes_nothing(store):
    fill(store)
    with pytest.raises(StoreError, match="table key must be"):
        store.table_write([TableDelete("t", b"a"), TablePut("t", b"", b"x")])
    with pytest.raises(StoreError, match="table name"):
        store.table_write([TableDelete("t", b"a"), TablePut("Bad-Name", b"k", b"x")])
    assert store.table_get("t", b"a") == b"va"


@pytest.mark.parametrize("call", [
    lambda s: s.table_get("t", b"x" * 481),
    lambda s: s.table_scan("t", b"a", start=b"b"),
    lambda s: s.table_scan("t", limit=-1),
    lambda s: s.table_get("", b"k"),
])
def test_bad_arguments_say_what_was_wrong(store, call):
    with pytest.raises(StoreError, match="table|scan|key"):
        call(store)


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
