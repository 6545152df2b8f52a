"""The rules of the `Store` protocol, as pytest tests."""

from __future__ import annotations

import abc
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from .. import (
    HOST,
    Acquire,
    Append,
    Capability,
    Continue,
    Cursor,
    InvocationRecord,
    PromiseType,
    Query,
    Renew,
    RequestCancel,
    Resolve,
    SetStatus,
    Started,
    Status,
    Step,
    Store,
    Tables,
    Transition,
    decode_entry,
    decode_value,
    encode_value,
    expand_id,
)
from ..errors import (
    AmbiguousId,
    InvalidId,
    InvocationBusy,
    InvocationConflict,
    InvocationNotFound,
    JournalError,
    LeaseLost,
    PromiseConflict,
    PromiseValueRefused,
)
from ._builders import T0, acquire, append, create, creation_op, step
from ._limits_contract import LimitsContract
from ._talk_contract import TalkRules


def _step(data: bytes) -> Step:
    entry = decode_entry(data)
    assert isinstance(entry, Step), entry
    return entry


def _step_value(data: bytes) -> Any:
    return decode_value(_step(data).value)


def _step_name(data: bytes) -> str:
    return _step(data).name


class StoreContract(LimitsContract, TalkRules, abc.ABC):
    """The rules of the `Store` protocol, as pytest tests; subclass it with `make_store`.
    Not collected itself (its name does not start with Test)."""

    @abc.abstractmethod
    def make_store(self, tmp_path: Any, request: Any) -> Store:
        """A new, empty store (`tmp_path` and `request` are pytest's fixtures)."""

    @pytest.fixture
    def store(self, tmp_path: Any, request: Any) -> Iterator[Store]:
        s = self.make_store(tmp_path, request)
        yield s
        s.close()

    # -- pages (`Store.page`) ---------------------------------------------------------------

    def _five(self, store: Any) -> None:
        for n in range(5):
            create(store, f"p{n}", value=n, handler="pkg.mod:even" if n % 2 == 0 else "pkg.mod:odd",
                   key="thread" if n < 2 else None, at=T0 + n)

    def test_a_page_is_newest_first_and_pages_by_cursor_each_invocation_once(self, store: Any) -> None:
        self._five(store)
        seen, query = [], Query(limit=2)
        while True:
            found = store.page(query)
            assert len(found.items) <= 2
            seen += [r.id for r in found.items]
            if found.next is None:
                break
            query = Query(limit=2, after=found.next)
        assert seen == ["p4", "p3", "p2", "p1", "p0"]

    def test_a_page_filters_by_status_handler_key_text_and_time(self, store: Any) -> None:
        self._five(store)
        acquire(store, "p3")

        def ids(**kw: Any) -> list[str]:
            return [r.id for r in store.page(Query(**kw)).items]

        assert ids(statuses=(Status.RUNNING,)) == ["p3"]
        assert ids(statuses=(Status.RUNNING, Status.PENDING)) == ["p4", "p3", "p2", "p1", "p0"]
        assert ids(handler="pkg.mod:odd") == ["p3", "p1"]
        assert ids(key="thread") == ["p1", "p0"]
        assert ids(text="P2") == ["p2"]
        assert ids(text="ODD", statuses=(Status.PENDING,)) == ["p1"]
        assert ids(since=T0 + 1, until=T0 + 3) == ["p2", "p1"]
        assert ids(handler="pkg.mod:even", after=Cursor(T0 + 4, "p4")) == ["p2", "p0"]
        assert ids(handler="nothing") == []

    def test_a_page_follows_status_changes_and_deletions(self, store: Any) -> None:
        self._five(store)
        epoch, _ = acquire(store, "p2")
        store.apply_one(SetStatus("p2", Transition(Status.COMPLETED, T0 + 10, release=True), epoch))
        assert [r.id for r in store.page(Query(statuses=(Status.COMPLETED,))).items] == ["p2"]
        assert "p2" not in [r.id for r in store.page(Query(statuses=(Status.PENDING,))).items]
        store.delete(["p2"])
        assert [r.id for r in store.page(Query()).items] == ["p4", "p3", "p1", "p0"]
        assert store.page(Query(statuses=(Status.COMPLETED,))).items == []

    def test_a_page_filters_by_tags_set_at_creation_or_by_an_append(self, store: Any) -> None:
        for n in range(5):
            create(store, f"p{n}", value=n, at=T0 + n,
                   tags={"customer": "acme" if n % 2 == 0 else "globex", **({"tier": "gold"} if n < 2 else {})})

        def ids(*tags: tuple[str, str], limit: int = 100) -> list[str]:
            return [r.id for r in store.page(Query(tags=tags, limit=limit)).items]

        assert ids(("customer", "acme")) == ["p4", "p2", "p0"]
        assert ids(("customer", "acme"), ("tier", "gold")) == ["p0"]
        assert store.get("p1").tags == {"customer": "globex", "tier": "gold"}
        epoch, _ = acquire(store, "p3")
        # A tag set by the handler (its `tagged` entry and the record's change in one append):
        # a new value of a key moves the invocation in the index.
        store.apply_one(Append("p3", epoch, [(1, step("a"))], tags=[("customer", "acme"), ("tier", "gold")]))
        assert store.get("p3").tags == {"customer": "acme", "tier": "gold"}
        assert ids(("customer", "acme")) == ["p4", "p3", "p2", "p0"]
        assert ids(("customer", "globex")) == ["p1"]
        assert ids(("tier", "gold"), limit=1) == ["p3"]
        # A bad tag is refused with none of its append's entries written.
        with pytest.raises(JournalError, match="tag key"):
            store.apply_one(Append("p3", epoch, [(2, step("b"))], tags=[("no=pe", "x")]))
        assert [seq for seq, _ in store.entries("p3")] == [0, 1]
        store.delete(["p3"])
        assert ids(("tier", "gold")) == ["p1", "p0"]

    def test_the_summary_counts_each_handler_by_status_as_statuses_change(self, store: Any) -> None:
        self._five(store)
        counts = {s.handler: (s.counts, s.oldest_runnable_at) for s in store.summary()}
        assert counts == {"pkg.mod:even": ({"pending": 3}, T0), "pkg.mod:odd": ({"pending": 2}, T0 + 1)}
        epoch, _ = acquire(store, "p0", now=T0 + 20)
        assert {s.handler: s.oldest_runnable_at for s in store.summary()}["pkg.mod:even"] == T0 + 2
        store.apply_one(SetStatus("p0", Transition(Status.FAILED, T0 + 30, release=True), epoch))
        epoch, _ = acquire(store, "p1", now=T0 + 20)
        store.apply_one(SetStatus("p1", Transition(Status.SUSPENDED, T0 + 30, waiting="ok", release=True), epoch))
        store.apply_one(Resolve("p1", "ok", T0 + 40, encode_value(1)))  # pending again, runnable since T0 + 40
        epoch, _ = acquire(store, "p3", now=T0 + 20)
        counts = {s.handler: (s.counts, s.oldest_runnable_at) for s in store.summary()}
        assert counts == {"pkg.mod:even": ({"pending": 2, "failed": 1}, T0 + 2),
                          "pkg.mod:odd": ({"pending": 1, "running": 1}, T0 + 40)}
        store.delete(["p0", "p2", "p4"])
        assert {s.handler: s.counts for s in store.summary()} == {"pkg.mod:odd": {"pending": 1, "running": 1}}

    def test_create_writes_record_and_start_entry(self, store: Any) -> None:
        record, created = create(store, "inv-1", value={"q": 1})
        assert created
        assert store.get("inv-1").status == Status.PENDING
        [(seq, data)] = store.entries("inv-1")
        started = decode_entry(data)
        assert isinstance(started, Started)
        assert seq == 0 and started.handler == "pkg.mod:agent"
        assert decode_value(started.input) == {"q": 1}

    def test_create_is_idempotent_for_the_same_input(self, store: Any) -> None:
        create(store, "inv-1", value="a")
        record, created = create(store, "inv-1", value="a")
        assert not created and record.id == "inv-1"
        assert store.entry_count("inv-1") == 1

    def test_create_with_a_different_input_conflicts(self, store: Any) -> None:
        create(store, "inv-1", value="a")
        with pytest.raises(InvocationConflict, match="different input"):
            create(store, "inv-1", value="b")

    @pytest.mark.parametrize("bad", ["", "x" * 201, "a\x00b", "tab\there", 42])
    def test_invalid_ids_are_rejected_with_a_reason(self, store: Any, bad: Any) -> None:
        with pytest.raises(InvalidId) as info:
            create(store, bad)
        assert "id" in str(info.value)

    def test_ids_up_to_200_utf8_bytes_are_accepted(self, store: Any) -> None:
        long_id = "é" * 100  # 200 bytes of UTF-8
        create(store, long_id)
        assert store.get(long_id).id == long_id

    def test_appends_are_read_back_in_seq_order(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        append(store, "inv-1", epoch, (2, step("b")), (1, step("a")))
        append(store, "inv-1", epoch, (10, step("c")))
        seqs = [s for s, _ in store.entries("inv-1")]
        assert seqs == [0, 1, 2, 10]
        assert [s for s, _ in store.entries("inv-1", start=2)] == [2, 10]

    def test_entries_of_one_invocation_do_not_leak_into_another(self, store: Any) -> None:
        create(store, "a")
        create(store, "ab")
        ea, _ = acquire(store, "a")
        eb, _ = acquire(store, "ab")
        append(store, "a", ea, (1, step("x")))
        append(store, "ab", eb, (1, step("y")), (2, step("z")))
        assert store.entry_count("a") == 2
        assert store.entry_count("ab") == 3

    def test_committed_entries_are_never_overwritten(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        append(store, "inv-1", epoch, (1, step("a", "first")))
        with pytest.raises(Exception, match="already journaled"):
            append(store, "inv-1", epoch, (1, step("a", "second")))
        assert _step_value(store.entries("inv-1")[1][1]) == "first"

    def test_an_append_that_would_overwrite_writes_none_of_its_entries_while_its_batch_commits(self, store: Any) -> None:
        create(store, "a")
        create(store, "b")
        ea, _ = acquire(store, "a")
        eb, _ = acquire(store, "b")
        append(store, "a", ea, (2, step("a", "second")))
        # One batch: `a` brings seq 1 (new) and seq 2 (taken); `b` is fine and must still commit.
        results = store.apply([Append("a", ea, [(1, step("x")), (2, step("y"))]), Append("b", eb, [(1, step("z"))])])
        assert "already journaled" in str(results[0]) and results[1] is None
        assert [seq for seq, _ in store.entries("a")] == [0, 2]
        assert _step_value(dict(store.entries("a"))[2]) == "second"
        assert store.entry_count("b") == 2

    def test_a_state_change_for_an_invocation_without_a_key_is_refused_with_none_of_its_entries(self, store: Any) -> None:
        create(store)  # no key
        epoch, _ = acquire(store)
        (result,) = store.apply([Append("inv-1", epoch, [(1, step("a"))], state=[("count", b"\x01")])])
        assert "has no key" in str(result)
        assert store.entry_count("inv-1") == 1

    def test_an_owner_that_appended_before_a_takeover_gets_lease_lost_after_it(self, store: Any) -> None:
        create(store)
        old, _ = acquire(store, owner="old", now=T0)
        append(store, "inv-1", old, (1, step("a")))
        append(store, "inv-1", old, (2, step("b")))  # the lease, unchanged since the last append
        new, _ = acquire(store, owner="new", now=T0 + 60_000_000)
        with pytest.raises(LeaseLost, match="epoch"):
            append(store, "inv-1", old, (3, step("late")))
        store.apply_one(Renew("inv-1", new, 10_000_000, T0 + 61_000_000))
        with pytest.raises(LeaseLost):  # still refused after the new owner's lease changed again
            append(store, "inv-1", old, (3, step("late")))
        append(store, "inv-1", new, (3, step("ok")))
        assert store.entry_count("inv-1") == 4

    def test_append_with_a_stale_epoch_gets_lease_lost_and_writes_nothing(self, store: Any) -> None:
        create(store)
        old, _ = acquire(store, owner="old", now=T0)
        # The old owner's lease expired; a new owner takes over with a higher epoch.
        new, _ = acquire(store, owner="new", now=T0 + 60_000_000)
        assert new == old + 1
        with pytest.raises(LeaseLost, match="epoch"):
            append(store, "inv-1", old, (1, step("late")))
        assert store.entry_count("inv-1") == 1
        append(store, "inv-1", new, (1, step("ok")))

    def test_a_live_lease_cannot_be_taken(self, store: Any) -> None:
        create(store)
        acquire(store, owner="first")
        with pytest.raises(InvocationBusy, match="being run"):
            acquire(store, owner="second")

    def test_a_dead_owner_on_this_host_loses_the_lease_at_once(self, store: Any) -> None:
        create(store)
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        acquire(store, owner="ghost", pid=int(dead.stdout))
        epoch, record = acquire(store, owner="me")
        assert epoch == 2 and record.status == Status.RUNNING

    def test_an_owner_on_another_host_keeps_the_lease_until_it_expires(self, store: Any) -> None:
        create(store)
        acquire(store, owner="remote", host="elsewhere", pid=1, ttl_us=10_000_000, now=T0)
        with pytest.raises(InvocationBusy):
            acquire(store, owner="me", now=T0 + 5_000_000)
        epoch, _ = acquire(store, owner="me", now=T0 + 11_000_000)
        assert epoch == 2

    def test_renew_extends_only_the_current_epoch(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store, owner="a", host="elsewhere", pid=1, ttl_us=10_000_000, now=T0)
        store.apply_one(Renew("inv-1", epoch, 10_000_000, T0 + 9_000_000))
        with pytest.raises(InvocationBusy):
            acquire(store, owner="b", now=T0 + 15_000_000)
        with pytest.raises(LeaseLost):
            store.apply_one(Renew("inv-1", epoch + 5, 10_000_000, T0))

    def test_terminal_append_sets_status_releases_the_lease_and_keeps_the_result(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        done = Transition(Status.COMPLETED, T0 + 1, result=encode_value(42), release=True)
        record = append(store, "inv-1", epoch, (1, step()), transition=done)
        assert record is not None and record.status == Status.COMPLETED and record.finished
        assert decode_value(store.get("inv-1").result) == 42
        assert store.lease("inv-1").owner == ""
        assert [r.id for r in store.list(Status.COMPLETED)] == ["inv-1"]
        assert store.list(Status.RUNNING) == []
        with pytest.raises(InvocationBusy, match="already completed"):
            acquire(store)

    def test_status_index_follows_every_transition(self, store: Any) -> None:
        create(store, "a")
        create(store, "b")
        assert {r.id for r in store.list(Status.PENDING)} == {"a", "b"}
        epoch, _ = acquire(store, "a")
        assert [r.id for r in store.list(Status.RUNNING)] == ["a"]
        store.apply_one(SetStatus("a", Transition(Status.SUSPENDED, T0, waiting="ok", release=True), epoch))
        assert [r.id for r in store.list(Status.SUSPENDED)] == ["a"]
        assert [r.id for r in store.list(Status.PENDING)] == ["b"]
        assert {r.id for r in store.list()} == {"a", "b"}
        # The index alone answers `ids`, in the same sets as `list`.
        assert store.ids(Status.SUSPENDED) == ["a"] and store.ids(Status.PENDING) == ["b"]
        assert store.ids(Status.RUNNING) == []

    def test_ready_gives_pending_invocations_highest_priority_first_then_oldest(self, store: Any) -> None:
        create(store, "old-low", at=T0)
        create(store, "new-high", at=T0 + 5, priority=10)
        create(store, "old-high", at=T0 + 1, priority=10)
        create(store, "negative", at=T0 - 5, priority=-3)
        create(store, "later", at=T0 + 2, start_at=T0 + 60_000_000)  # delayed: its timer has it
        assert store.ready() == ["old-high", "new-high", "old-low", "negative"]
        assert store.ready(limit=2) == ["old-high", "new-high"]
        assert store.due_timers(T0 + 60_000_000) == ["later"] and "later" in store.ids(Status.PENDING)
        epoch, _ = acquire(store, "old-high")  # claimed: out of the queue
        assert store.ready() == ["new-high", "old-low", "negative"]
        store.apply_one(SetStatus("old-high", Transition(Status.PENDING, T0 + 9, release=True), epoch))
        assert store.ready()[0] == "old-high"  # given back: in its place again
        epoch, _ = acquire(store, "later", now=T0 + 60_000_000)  # its time came: running, timer gone
        assert store.due_timers(T0 + 120_000_000) == [] and store.get("later").status == Status.RUNNING

    def test_a_delayed_start_asked_to_cancel_becomes_ready_to_receive_it(self, store: Any) -> None:
        create(store, "later", start_at=T0 + 60_000_000)
        assert store.ready() == []
        store.apply_one(RequestCancel("later", T0 + 1))
        assert store.ready() == ["later"] and store.due_timers(T0) == []

    def test_resolving_the_awaited_promise_makes_a_suspended_invocation_pending(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        store.apply_one(SetStatus("inv-1", Transition(Status.SUSPENDED, T0, waiting="approval", release=True), epoch))
        record = store.apply_one(Resolve("inv-1", "approval", T0 + 1, b"\xc3"))
        assert record.status == Status.PENDING
        resolution = store.resolution("inv-1", "approval")
        assert decode_value(resolution.value) is True and resolution.error is None

    def test_a_promise_resolved_before_the_handler_suspends_is_not_lost(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        store.apply_one(Resolve("inv-1", "approval", T0, b"\xc3"))  # arrives while still running
        record = store.apply_one(
            SetStatus("inv-1", Transition(Status.SUSPENDED, T0, waiting="approval", release=True), epoch)
        )
        assert record.status == Status.PENDING

    def test_a_value_that_does_not_fit_the_awaited_type_is_refused_and_the_promise_stays_pending(
            self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        typed = PromiseType("ok", "bool", '{"type": "boolean"}')
        record = store.apply_one(SetStatus("inv-1", Transition(
            Status.SUSPENDED, T0, waiting="ok", release=True, promise_types=[typed]), epoch))
        assert record.promise_types == [typed]
        with pytest.raises(PromiseValueRefused, match="expects bool"):
            store.apply_one(Resolve("inv-1", "ok", T0 + 1, b"\x01"))  # the integer 1
        assert store.resolution("inv-1", "ok") is None
        assert store.require("inv-1").status == Status.SUSPENDED
        store.apply_one(Resolve("inv-1", "ok", T0 + 2, None, "a rejection is no value: never refused"))
        assert store.require("inv-1").status == Status.PENDING
        assert store.require("inv-1").promise_types == []  # the wait is over

    def test_a_promise_is_settled_once(self, store: Any) -> None:
        create(store)
        store.apply_one(Resolve("inv-1", "p", T0, b"\x01"))
        store.apply_one(Resolve("inv-1", "p", T0, b"\x01"))  # same outcome again: fine
        with pytest.raises(PromiseConflict, match="already resolved"):
            store.apply_one(Resolve("inv-1", "p", T0, b"\x02"))
        with pytest.raises(PromiseConflict):
            store.apply_one(Resolve("inv-1", "p", T0, None, "no"))

    def test_resolving_an_unknown_invocation_says_so(self, store: Any) -> None:
        with pytest.raises(InvocationNotFound, match="nope"):
            store.apply_one(Resolve("nope", "p", T0, b"\x01"))

    def test_due_timers_are_found_through_the_index(self, store: Any) -> None:
        for i, wake in enumerate([T0 + 10, T0 + 5, T0 + 50]):
            create(store, f"t{i}")
            epoch, _ = acquire(store, f"t{i}")
            store.apply_one(SetStatus(f"t{i}", Transition(Status.SUSPENDED, T0, wake_at=wake, release=True), epoch))
        assert store.due_timers(T0 + 20) == ["t1", "t0"]
        epoch, _ = acquire(store, "t1")
        assert store.due_timers(T0 + 20) == ["t0"]

    def test_cancel_request_wakes_a_suspended_invocation(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        store.apply_one(SetStatus("inv-1", Transition(Status.SUSPENDED, T0, waiting="p", release=True), epoch))
        record = store.apply_one(RequestCancel("inv-1", T0 + 1))
        assert record.cancel_requested and record.status == Status.PENDING

    def test_invocations_created_in_one_batch_each_succeed_or_conflict_on_their_own(self, store: Any) -> None:
        creation = creation_op
        create(store, "taken", value="first")
        results = store.apply([creation("a", 1), creation("taken", "other"), creation("taken", "first"),
                               creation("b", 2, key="thread-1"), creation("bad\x00id", 3)])
        (a, a_created), conflict, (taken, taken_created), (b, _), bad = results
        assert a_created and a.id == "a" and not taken_created and taken.id == "taken"
        assert isinstance(conflict, InvocationConflict) and isinstance(bad, InvalidId)
        assert store.get("b").key == "thread-1" and store.entry_count("a") == 1
        assert {r.id for r in store.list(Status.PENDING)} == {"taken", "a", "b"}  # each one runnable

    def test_a_creation_with_a_lease_leaves_one_owner_at_epoch_1(self, store: Any) -> None:
        def lease(invocation_id: str, owner: str = "me") -> Acquire:
            return Acquire(invocation_id, owner, HOST, os.getpid(), 30_000_000, T0)

        create(store, "old")
        create(store, "first-of-key", key="thread-1")
        results = store.apply([creation_op("a", 1, lease=lease("a")), creation_op("old", "hello", lease=lease("old")),
                               creation_op("behind", 2, key="thread-1", lease=lease("behind")),
                               creation_op("keyed", 3, key="thread-2", lease=lease("keyed"))])
        (a, a_created), (old, old_created), (behind, _), (keyed, _) = results
        assert a_created and not old_created
        # An existing invocation is only found: nothing is taken from it.
        assert old.status == Status.PENDING and store.live_lease("old", T0) is None
        if Capability.LEASE_AT_CREATE in store.capabilities:
            # First in its key's queue it runs; behind another it waits, held by its creator,
            # whom nobody else can take it from until its turn comes.
            assert a.status == keyed.status == Status.RUNNING and store.get("a").status == Status.RUNNING
            assert {r.id for r in store.list(Status.RUNNING)} == {"a", "keyed"}  # the status index says so too
            assert behind.status == Status.PENDING and store.live_lease("behind", T0).owner == "me"
            assert {r.id for r in store.list(Status.PENDING)} == {"old", "first-of-key", "behind"}
            assert store.live_lease("a", T0).owner == store.live_lease("keyed", T0).owner == "me"
            with pytest.raises(InvocationBusy):
                acquire(store, "behind", "rival", now=T0 + 1)
            epoch = 1
        else:
            assert a.status == behind.status == keyed.status == Status.PENDING
            assert all(store.live_lease(i, T0) is None for i in ("a", "behind", "keyed"))
            epoch, _ = acquire(store, "a", "me")
        assert epoch == 1
        with pytest.raises(InvocationBusy):
            acquire(store, "a", "rival")
        append(store, "a", epoch, (1, step()))
        assert [s for s, _ in store.entries("a")] == [0, 1]

    def test_a_keys_queue_keeps_the_order_of_creation_whatever_the_creators_clocks_read(self, store: Any) -> None:
        create(store, "z", key="thread-1", at=T0)
        create(store, "a", key="thread-1", at=T0)  # the same microsecond, and an id that sorts first
        create(store, "m", key="thread-1", at=T0 - 5_000)  # a clock 5 ms behind: another host, or set back
        create(store, "x", key="thread-2", at=T0 - 10)  # another key's queue is its own
        store.apply([creation_op("c", 1, key="thread-3"), creation_op("b", 2, key="thread-3")])  # one transaction
        assert store.key_queue("thread-1") == ["z", "a", "m"]
        assert store.key_queue("thread-2") == ["x"] and store.key_queue("thread-3") == ["c", "b"]
        for behind in ("a", "m"):
            with pytest.raises(InvocationBusy, match="queued behind 'z'"):
                acquire(store, behind)
        epoch, _ = acquire(store, "z")
        append(store, "z", epoch, (1, step()), transition=Transition(Status.COMPLETED, T0 + 1, release=True))
        with pytest.raises(InvocationBusy, match="queued behind 'a'"):
            acquire(store, "m")
        acquire(store, "a")
        # A key's first invocation in a while queues at its own clock's time again.
        create(store, "late", key="thread-2", at=T0 + 60_000_000)
        assert store.get("late").queued_at == T0 + 60_000_000

    def test_every_cancel_request_is_counted_so_a_watcher_knows_when_to_look(self, store: Any) -> None:
        if Capability.CANCEL_COUNTER not in store.capabilities:
            pytest.skip("the store does not declare Capability.CANCEL_COUNTER")
        create(store, "a")
        create(store, "b")
        assert store.cancel_requests_made() == 0
        store.apply_one(RequestCancel("a", T0 + 1))
        store.apply([RequestCancel("b", T0 + 2), RequestCancel("a", T0 + 3)])
        assert store.cancel_requests_made() == 3
        assert store.get("a").cancel_requested and store.get("b").cancel_requested

    def test_a_failed_op_in_a_batch_does_not_stop_the_others(self, store: Any) -> None:
        create(store, "a")
        create(store, "b")
        ea, _ = acquire(store, "a")
        eb, _ = acquire(store, "b")
        results = store.apply([
            Append("a", ea + 1, [(1, step())]),
            Append("b", eb, [(1, step())]),
        ])
        assert isinstance(results[0], LeaseLost) and results[1] is None
        assert store.entry_count("a") == 1 and store.entry_count("b") == 2

    def test_delete_removes_entries_and_optionally_keeps_the_record(self, store: Any) -> None:
        create(store, "a")
        create(store, "b")
        assert store.delete(["a"], keep_record=True) == 1
        assert store.entries("a") == [] and store.get("a") is not None
        assert store.delete(["b", "missing"]) == 1
        assert store.get("b") is None and store.list(Status.PENDING) == [store.get("a")]

    def test_a_batch_of_step_appends_applies_each_by_the_rules(self, store: Any) -> None:
        epochs = {}
        for name in "abcd":
            create(store, name)
            epochs[name], _ = acquire(store, name, owner=f"o-{name}")
            append(store, name, epochs[name], (1, step("first")))  # each has appended once already
        acquire(store, "b", owner="rival", now=T0 + 60_000_000)  # b's owner lost its lease
        results = store.apply([
            Append("a", epochs["a"], [(2, step("x"))]),
            Append("b", epochs["b"], [(2, step("x"))]),
            Append("c", epochs["c"], [(1, step("again"))]),
            Append("d", epochs["d"], [(2, step("x"))]),
            Append("a", epochs["a"], [(3, step("y"))]),
        ])
        assert results[0] is None and results[3] is None and results[4] is None
        assert isinstance(results[1], LeaseLost)
        assert isinstance(results[2], JournalError) and "already journaled" in str(results[2])
        assert [s for s, _ in store.entries("a")] == [0, 1, 2, 3]
        assert [s for s, _ in store.entries("b")] == [0, 1]
        assert _step_name(store.entries("c", start=1)[0][1]) == "first"

    def test_continue_never_overwrites_an_entry(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        append(store, "inv-1", epoch, (1, step("a")))
        new = InvocationRecord("inv-1~1", "pkg.mod:agent", Status.PENDING, T0, T0)
        done = Transition(Status.COMPLETED, T0, release=True)
        with pytest.raises(JournalError, match="already journaled"):
            store.apply_one(Continue("inv-1", epoch, [(1, step("b"))], done, new, step("start")))
        assert store.get("inv-1~1") is None and store.get("inv-1").status == Status.RUNNING
        assert [_step_name(d) for s, d in store.entries("inv-1") if s == 1] == ["a"]
        store.apply_one(Continue("inv-1", epoch, [(2, step("b"))], done, new, step("start")))
        assert store.get("inv-1").continued_as == "inv-1~1" and store.entry_count("inv-1~1") == 1

    def test_require_names_the_missing_invocation_and_what_to_do(self, store: Any) -> None:
        with pytest.raises(InvocationNotFound, match="'nope'.*journal ls"):
            store.require("nope")
        create(store)
        assert store.require("inv-1").id == "inv-1"

    def test_get_many_reads_each_record_in_the_order_asked_none_for_a_missing_one(self, store: Any) -> None:
        for name in ("inv-b", "inv-a", "inv-c"):
            create(store, name)
        got = store.get_many(["inv-c", "nope", "inv-a", "inv-c"])
        assert [r.id if r is not None else None for r in got] == ["inv-c", None, "inv-a", "inv-c"]
        assert got[0] == store.get("inv-c")
        assert store.get_many([]) == []

    def test_ids_starting_a_prefix_come_in_id_order_up_to_the_limit(self, store: Any) -> None:
        for name in ("run-b", "run-a2", "run-a1", "run", "rum", "ru\u00e9-1", "other"):
            create(store, name)
        assert store.ids_starting("run-a", 10) == ["run-a1", "run-a2"]
        assert store.ids_starting("run", 10) == ["run", "run-a1", "run-a2", "run-b"]
        assert store.ids_starting("run", 2) == ["run", "run-a1"]
        assert store.ids_starting("ru\u00e9", 10) == ["ru\u00e9-1"]
        assert store.ids_starting("nothing", 10) == []
        store.delete(["run-a1"])
        assert store.ids_starting("run-a", 10) == ["run-a2"]

    def test_expand_id_takes_an_id_or_a_unique_prefix_and_names_the_ambiguous(self, store: Any) -> None:
        for name in ("3f2a9c01", "3f2a9c01-retry-1", "3f2b0000"):
            create(store, name)
        assert expand_id(store, "3f2a9c01") == "3f2a9c01"  # an id, though it starts another
        assert expand_id(store, "3f2a9c01-r") == "3f2a9c01-retry-1"
        assert expand_id(store, "3f2b") == "3f2b0000"
        with pytest.raises(AmbiguousId, match="3f2a9c01, 3f2a9c01-retry-1, 3f2b0000") as ambiguous:
            expand_id(store, "3f2")
        assert ambiguous.value.matches == ["3f2a9c01", "3f2a9c01-retry-1", "3f2b0000"]
        with pytest.raises(InvocationNotFound, match="'4'"):
            expand_id(store, "4")

    def test_live_lease_is_the_lease_only_while_it_protects_a_live_owner(self, store: Any) -> None:
        create(store)
        assert store.live_lease("inv-1", T0) is None
        epoch, _ = acquire(store, owner="remote", host="elsewhere", pid=1, ttl_us=10_000_000, now=T0)
        assert store.live_lease("inv-1", T0 + 1).epoch == epoch
        assert store.live_lease("inv-1", T0 + 11_000_000) is None

    def test_unknown_invocation_reads_are_empty_or_none(self, store: Any) -> None:
        create(store)  # another invocation exists: nothing of it may show
        assert store.get("nope") is None
        assert store.entries("nope") == [] and store.entry_count("nope") == 0
        assert store.lease("nope") is None and store.live_lease("nope", T0) is None
        assert store.resolution("nope", "approval") is None
        assert store.state("nope") == {} and store.key_queue("nope") == []

    def test_apply_results_come_back_in_op_order(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        results = store.apply([Append("inv-1", epoch, [(i, step(str(i)))]) for i in range(1, 6)])
        assert results == [None] * 5
        assert [s for s, _ in store.entries("inv-1")] == list(range(6))

    def test_the_declared_capabilities_are_offered(self, store: Any) -> None:
        assert all(isinstance(c, Capability) for c in store.capabilities)
        if Capability.TABLES in store.capabilities:
            assert isinstance(store, Tables)
        if Capability.CANCEL_COUNTER in store.capabilities:
            assert store.cancel_requests_made() == 0
        assert store.outage() is None  # its server (if it has one) answers
