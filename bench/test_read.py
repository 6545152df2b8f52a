"""One store read (`LmdbStore.get` of an invocation's record), beside raw LMDB's begin, get
and abort of the same key. The lease watcher makes one such read per running invocation
per poll, and `Engine.run` several per invocation; the difference is the store's own
reader (docs/performance.md, W5)."""

from __future__ import annotations

import pytest

from journal import InvocationRecord, Started, Status, encode_entry, encode_value

GROUP = "read one invocation record"


@pytest.fixture
def filled(store):
    for i in range(1000):
        record = InvocationRecord(f"inv-{i}", "bench:h", Status.PENDING, 1, 1)
        store.create(record, encode_entry(Started("bench:h", encode_value(i), 1)))
    return store


@pytest.mark.benchmark(group=GROUP)
def test_raw_lmdb_begin_get_abort(benchmark, filled):
    env, db = filled.env, filled._dbs["invocations"]

    def read() -> bytes | None:
        txn = env.begin()
        try:
            return txn.get(b"inv-500", db=db)
        finally:
            txn.abort()

    assert benchmark(read) is not None


@pytest.mark.benchmark(group=GROUP)
def test_store_get(benchmark, filled):
    assert benchmark(filled.get, "inv-500").id == "inv-500"
