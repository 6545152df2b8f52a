"""The run queue (`journal/kv/_runnable.py`): a store made since it exists starts with it
complete, so a worker's first look reads the head of the queue, never every pending record."""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import pytest

from journal import MemoryStore
from journal.kv import _runnable
from journal.testing import creation_op


def test_a_new_store_never_builds_its_run_queue_by_reading_every_record(backend, monkeypatch):
    def read_everything(txn):
        raise AssertionError("the run queue was built by reading every pending record")

    monkeypatch.setattr(_runnable, "build", read_everything)
    store = backend.open()
    store.apply([creation_op(f"inv-{n:04d}", n, at=1_000_000 + n) for n in range(500)])
    assert store.ready(3) == ["inv-0000", "inv-0001", "inv-0002"]
    assert backend.open().ready(1) == ["inv-0000"]  # another handle on it, opened afresh


def test_a_store_written_before_the_run_queue_is_queued_once(backend):
    if backend.kind == "memory":
        pytest.skip("a memory store is never reopened")
    store = backend.open()
    store.apply([creation_op(f"inv-{n:04d}", n, at=1_000_000 + n) for n in range(20)])

    def as_before(txn):  # the queue's keys and its mark gone, as in a store written before it
        for key, _ in list(txn.scan("listing", _runnable.PREFIX)):
            txn.delete("listing", bytes(key))
        txn.delete("meta", _runnable.BUILT)

    store._transact(as_before)
    reopened = backend.open()
    assert reopened.ready() == [f"inv-{n:04d}" for n in range(20)]


class _WholeFetchStore(MemoryStore):
    """A memory store whose scans fetch as a database's do: `scan` every row of the range at
    once, `scan_some` only the rows asked for; it counts the rows of the run queue fetched."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched = 0

    @contextmanager
    def _read(self):
        with super()._read() as txn:
            scan = txn.scan

            def whole(table, prefix, start=None):
                rows = list(scan(table, prefix, start))
                self.fetched += len(rows) if prefix == _runnable.PREFIX else 0
                return iter(rows)

            def some(table, prefix, start, limit):
                rows = list(itertools.islice(scan(table, prefix, start), limit))
                self.fetched += len(rows) if prefix == _runnable.PREFIX else 0
                return iter(rows)

            txn.scan, txn.scan_some = whole, some
            try:
                yield txn
            finally:
                del txn.scan, txn.scan_some


def test_the_head_of_a_long_run_queue_is_fetched_alone():
    """A worker's look asks for the head of the queue; over a database, the rows behind it
    (a hundred thousand waiting) must not be fetched to be thrown away."""
    store = _WholeFetchStore()
    for start in range(0, 10_000, 2_000):
        store.apply([creation_op(f"inv-{n:05d}", n, at=1_000_000 + n) for n in range(start, start + 2_000)])
    assert store.ready(64)[:2] == ["inv-00000", "inv-00001"]
    assert store.fetched == 64
