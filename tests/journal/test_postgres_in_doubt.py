"""Commits whose answer was lost with their connection, on PostgreSQL: each kind of write is
sent through a proxy (`bench/pgproxy.py`) that forwards its commit, lets the server answer,
drops the answer and closes the connection. The store reconnects, does the write again,
and finds what the first attempt did: the caller gets the answer it would have had, never
`LeaseLost`, "already journaled" or a second copy."""

from __future__ import annotations

import msgspec
import pytest

from bench.pgproxy import CommitCutter
from journal import (
    Acquire,
    Append,
    Continue,
    InvocationRecord,
    PostgresStore,
    Resolve,
    SetStatus,
    Status,
    Transition,
    encode_value,
)

from .helpers import T0, acquire, create, step


@pytest.fixture
def proxy(pg_server):
    cutter = CommitCutter(str(pg_server.dir), pg_server.port).start()
    yield cutter
    cutter.stop()


@pytest.fixture
def store(pg_server, proxy):
    name = pg_server.create_database()
    s = PostgresStore(proxy.url(name), reconnect_for=30)
    yield s
    s.close()


def lost(proxy: CommitCutter, do):
    """`do()` with the answer to its next commit lost; what it returned."""
    proxy.cut_after(1)
    result = do()
    assert proxy.cuts == 1 and proxy.cut, "no commit was cut"
    proxy.cuts, proxy.cut = 0, []
    return result


def test_a_step_whose_commit_answer_was_lost_is_journaled_once(store, proxy):
    create(store)
    epoch, _ = acquire(store)
    assert store.apply([Append("inv-1", epoch, [(1, step("a"))])]) == [None]  # (its lease bytes are known now)
    assert lost(proxy, lambda: store.apply([Append("inv-1", epoch, [(2, step("b"))])])) == [None]
    assert b"INSERT INTO journal.entries" in proxy_cut(proxy, store, lambda: store.apply(
        [Append("inv-1", epoch, [(3, step("c"))]), Append("inv-1", epoch, [(4, step("d"))])]))
    assert [seq for seq, _ in store.entries("inv-1")] == [0, 1, 2, 3, 4]


def proxy_cut(proxy: CommitCutter, store: PostgresStore, do) -> bytes:
    proxy.cut_after(1)
    assert do() == [None, None]
    assert proxy.cuts == 1
    sql, proxy.cuts, proxy.cut = proxy.cut[0], 0, []
    return sql


def test_an_append_of_several_entries_whose_answer_was_lost_is_done_once(store, proxy):
    create(store)
    epoch, _ = acquire(store)
    assert lost(proxy, lambda: store.apply_one(Append("inv-1", epoch, [(1, step("a")), (2, step("b"))]))) is None
    assert [seq for seq, _ in store.entries("inv-1")] == [0, 1, 2]


def test_a_final_write_whose_answer_was_lost_reports_the_outcome_not_a_lost_lease(store, proxy):
    create(store)
    epoch, _ = acquire(store)
    done = Transition(Status.COMPLETED, T0 + 5, result=encode_value("ok"), release=True)
    record = lost(proxy, lambda: store.apply_one(Append("inv-1", epoch, [(1, step("a"))], done)))
    assert isinstance(record, InvocationRecord) and record.status == Status.COMPLETED
    assert msgspec.msgpack.decode(record.result) == "ok"
    assert [seq for seq, _ in store.entries("inv-1")] == [0, 1]


def test_a_status_change_whose_answer_was_lost_is_found_done(store, proxy):
    create(store)
    epoch, _ = acquire(store)
    parked = Transition(Status.DIVERGED, T0 + 5, divergence="seq 1 differs", release=True)
    record = lost(proxy, lambda: store.apply_one(SetStatus("inv-1", parked, epoch)))
    assert record.status == Status.DIVERGED and record.divergence == "seq 1 differs"


def test_a_claim_whose_answer_was_lost_leaves_the_claimer_owning_it(store, proxy):
    create(store)
    epoch, record = lost(proxy, lambda: store.apply_one(Acquire("inv-1", "me", "here", 1, 30_000_000, T0)))
    assert record.status == Status.RUNNING
    lease = store.lease("inv-1")
    assert lease.owner == "me" and lease.epoch == epoch
    assert store.apply([Append("inv-1", epoch, [(1, step("a"))])]) == [None]


def test_a_creation_whose_answer_was_lost_says_it_created_the_invocation(store, proxy):
    record, created = lost(proxy, lambda: create(store))
    assert created and record.status == Status.PENDING
    assert create(store) == (record, False)  # a second creation attaches, as ever


def test_a_promise_resolved_whose_answer_was_lost_is_resolved_once(store, proxy):
    create(store)
    yes = bytes(encode_value(True))
    record = lost(proxy, lambda: store.apply_one(Resolve("inv-1", "approval", T0 + 1, yes)))
    assert record.id == "inv-1" and bytes(store.resolution("inv-1", "approval").value) == yes


def test_a_continuation_whose_answer_was_lost_is_found_done(store, proxy):
    create(store, "gen")
    epoch, _ = acquire(store, "gen")
    done = Transition(Status.COMPLETED, T0 + 5, result=encode_value({"continued_as": "gen~1"}), release=True)
    record = lost(proxy, lambda: store.apply_one(Continue("gen", epoch, [(1, step("a"))], done, *_successor())))
    assert record.status == Status.COMPLETED and record.continued_as == "gen~1"
    assert store.get("gen~1").status == Status.PENDING


def _successor() -> tuple[InvocationRecord, bytes]:
    from journal import Started, digest, encode_entry

    raw = encode_value("next")
    d = digest(bytes(raw))
    record = InvocationRecord("gen~1", "pkg.mod:agent", Status.PENDING, T0, T0, None, d, continued_from="gen")
    return record, encode_entry(Started("pkg.mod:agent", raw, T0, None, d))
