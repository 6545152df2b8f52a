"""A stateful model of the store: random operations against LMDB and memory, checked against plain dicts."""

import os
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from journal import (
    Acquire,
    Append,
    InvocationRecord,
    LmdbStore,
    MemoryStore,
    Resolve,
    SetStatus,
    Started,
    Status,
    Transition,
    check,
    digest,
    encode_entry,
    encode_value,
)
from journal.errors import InvocationBusy, InvocationConflict, LeaseLost, PromiseConflict

IDS = st.sampled_from(["a", "b", "ab", "é"])
VALUES = st.integers(0, 3)


class StoreModel(RuleBasedStateMachine):
    """Every backend must behave like this model: dicts of records, entries, epochs and promises."""

    make_store = staticmethod(MemoryStore)

    def __init__(self):
        super().__init__()
        self.store = self.make_store()
        self.inputs: dict[str, int] = {}
        self.entries: dict[str, dict[int, bytes]] = {}
        self.status: dict[str, Status] = {}
        self.epoch: dict[str, int] = {}  # the current lease epoch of each invocation
        self.held: dict[str, int] = {}  # epochs this test still holds (the lease was not released)
        self.promises: dict[tuple[str, str], int] = {}
        self.owners = 0

    def teardown(self):
        self.store.close()

    @rule(inv=IDS, value=VALUES)
    def create(self, inv, value):
        raw = encode_value(value)
        d = digest(bytes(raw))
        record = InvocationRecord(inv, "m:h", Status.PENDING, 1, 1, None, d)
        try:
            _, created = self.store.create(record, encode_entry(Started("m:h", raw, 1, None, d)))
        except InvocationConflict:
            assert self.inputs[inv] != value
            return
        assert created == (inv not in self.inputs)
        if created:
            self.inputs[inv] = value
            self.entries[inv] = {0: encode_entry(Started("m:h", raw, 1, None, d))}
            self.status[inv] = Status.PENDING

    @precondition(lambda self: self.inputs)
    @rule(data=st.data())
    def acquire(self, data):
        inv = data.draw(st.sampled_from(sorted(self.inputs)))
        try:
            # Another host's owner, so only expiry frees it; time never advances here.
            self.owners += 1
            epoch, record = self.store.apply_one(Acquire(inv, f"owner-{self.owners}", "elsewhere", 1, 10**9, 0))
        except InvocationBusy:
            assert inv in self.held or self.status[inv] in (Status.COMPLETED, Status.FAILED)
            return
        assert inv not in self.held and epoch == self.epoch.get(inv, 0) + 1
        self.epoch[inv] = self.held[inv] = epoch
        self.status[inv] = Status.RUNNING

    @precondition(lambda self: self.inputs)
    @rule(data=st.data(), seq=st.integers(1, 6), value=VALUES, stale=st.booleans())
    def append(self, data, seq, value, stale):
        inv = data.draw(st.sampled_from(sorted(self.inputs)))
        epoch = self.epoch.get(inv, 0) - (1 if stale else 0)
        entry = encode_entry(Started("m:h", encode_value(value), seq))
        try:
            self.store.apply_one(Append(inv, epoch, [(seq, entry)]))
        except LeaseLost:
            assert stale or inv not in self.held
            return
        except Exception as exc:
            assert "already journaled" in str(exc) and seq in self.entries[inv]
            return
        assert not stale and inv in self.held and seq not in self.entries[inv]
        self.entries[inv][seq] = entry

    @precondition(lambda self: self.held)
    @rule(data=st.data(), status=st.sampled_from([Status.SUSPENDED, Status.COMPLETED, Status.FAILED]))
    def release(self, data, status):
        inv = data.draw(st.sampled_from(sorted(self.held)))
        epoch = self.held.pop(inv)
        waiting = "p" if status == Status.SUSPENDED else None
        record = self.store.apply_one(SetStatus(inv, Transition(status, 2, waiting=waiting, release=True), epoch))
        expected = status
        if status == Status.SUSPENDED and (inv, "p") in self.promises:
            expected = Status.PENDING  # resolved before it suspended: runnable at once
        assert record.status == expected
        self.status[inv] = expected

    @precondition(lambda self: self.inputs)
    @rule(data=st.data(), value=VALUES)
    def resolve(self, data, value):
        inv = data.draw(st.sampled_from(sorted(self.inputs)))
        try:
            record = self.store.apply_one(Resolve(inv, "p", 3, bytes(encode_value(value))))
        except PromiseConflict:
            assert self.promises.get((inv, "p"), value) != value or self.status[inv] in (Status.COMPLETED, Status.FAILED)
            return
        if self.promises.get((inv, "p")) != value:  # a repeat of the same outcome is always accepted
            assert self.status[inv] not in (Status.COMPLETED, Status.FAILED)
        if (inv, "p") not in self.promises and self.status[inv] == Status.SUSPENDED:
            self.status[inv] = Status.PENDING
        self.promises[(inv, "p")] = value
        assert record.status == self.status[inv]

    @invariant()
    def store_matches_model(self):
        for inv, entries in self.entries.items():
            assert dict(self.store.entries(inv)) == entries
            assert self.store.get(inv).status == self.status[inv]
        for status in Status:
            assert {r.id for r in self.store.list(status)} == {i for i, s in self.status.items() if s == status}

    @invariant()
    def indexes_are_consistent(self):
        assert [p for p in check(self.store) if "terminal" not in p.message and "gap" not in p.message] == []


class LmdbStoreModel(StoreModel):
    @staticmethod
    def make_store():
        path = tempfile.mkdtemp(prefix="journal-model-")
        store = LmdbStore(os.path.join(path, "db"))
        store._model_dir = path
        return store

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.store._model_dir, ignore_errors=True)


TestMemoryStoreModel = StoreModel.TestCase
TestMemoryStoreModel.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestLmdbStoreModel = LmdbStoreModel.TestCase
TestLmdbStoreModel.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
