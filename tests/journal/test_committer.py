"""The append path: group commit and durability modes."""

import anyio
import pytest

from journal import Append, Committer, LmdbStore, MemoryStore, decode_entry, decode_value
from journal.commit import _flusher
from journal.errors import LeaseLost, StoreError

from ..waiting import until
from .helpers import acquire, create, step

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_concurrent_sync_appends_share_transactions_and_fsyncs(tmp_path):
    store = LmdbStore(tmp_path / "db")
    committer = Committer(store, "sync")
    epochs = {}
    for i in range(100):
        create(store, f"i{i}")
        epochs[i], _ = acquire(store, f"i{i}")

    async def appender(i):
        for seq in range(1, 6):
            await committer.submit(Append(f"i{i}", epochs[i], [(seq, step(str(seq), i))]))

    async with anyio.create_task_group() as tg:
        for i in range(100):
            tg.start_soon(appender, i)
    assert all(store.entry_count(f"i{i}") == 6 for i in range(100))
    # 500 appends, far fewer fsynced transactions: they were grouped.
    assert committer.batches < 100, committer.batches
    store.close()


async def test_leases_taken_together_share_one_transaction_and_wait_for_no_fsync(tmp_path):
    import os

    from journal import HOST, Acquire
    from journal.errors import InvocationBusy

    store = LmdbStore(tmp_path / "db")
    synced = []
    real_sync = store.sync
    store.sync = lambda: (synced.append(1), real_sync())
    committer = Committer(store, "sync")  # after the patch: its flusher keeps the fsync it is given
    for i in range(50):
        create(store, f"i{i}")
    results = {}

    async def take(i, owner):
        try:
            results[i, owner] = (await committer.submit_batched(Acquire(f"i{i}", owner, HOST, os.getpid(), 10**9, 1)))[0]
        except InvocationBusy as exc:
            results[i, owner] = exc

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(take, i, "me")
        tg.start_soon(take, 7, "rival")  # in the same transaction, after "me" took it: refused on its own
    assert all(results[i, "me"] == 1 for i in range(50)) and isinstance(results[7, "rival"], InvocationBusy)
    assert all(store.lease(f"i{i}").owner == "me" for i in range(50))
    assert committer.batches < 5 and synced == []
    await committer.flush()  # the counter sees an fsync when there is one
    assert synced == [1]
    store.close()


async def test_each_op_of_a_group_gets_its_own_result(tmp_path):
    store = LmdbStore(tmp_path / "db")
    committer = Committer(store, "sync")
    create(store, "a")
    create(store, "b")
    ea, _ = acquire(store, "a")
    eb, _ = acquire(store, "b")
    results = {}

    async def submit(name, op):
        try:
            results[name] = await committer.submit(op)
        except LeaseLost as exc:
            results[name] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(submit, "good", Append("a", ea, [(1, step())]))
        tg.start_soon(submit, "stale", Append("b", eb + 1, [(1, step())]))
    assert results["good"] is None and isinstance(results["stale"], LeaseLost)
    store.close()


async def test_async_mode_commits_before_returning_and_flushes_in_the_background(tmp_path):
    store = LmdbStore(tmp_path / "db")
    committer = Committer(store, "async")
    create(store)
    epoch, _ = acquire(store)
    await committer.submit(Append("inv-1", epoch, [(1, step("a", "v"))]))
    assert decode_value(decode_entry(store.entries("inv-1")[1][1]).value) == "v"
    assert store._sync_thread is not None and store._sync_thread.is_alive()
    # the background flusher clears the dirty flag within ~100 ms (on an idle machine)
    await until(lambda: not store._dirty.is_set(), "the background flusher to clear the dirty flag")
    store.close()


async def test_memory_store_works_through_the_committer():
    store = MemoryStore()
    committer = Committer(store, "sync")
    create(store)
    epoch, _ = acquire(store)
    await committer.submit(Append("inv-1", epoch, [(1, step())]))
    assert store.entry_count("inv-1") == 2


@pytest.mark.parametrize("where", ["loop", "thread"])
async def test_a_failed_fsync_fails_every_append_of_its_group(tmp_path, monkeypatch, where):
    if where == "thread":  # as on a disk that has been slow lately
        monkeypatch.setattr(_flusher, "_INLINE_BELOW", 0.0)
    store = LmdbStore(tmp_path / "db")
    for name in ("a", "b"):
        create(store, name)
    epochs = {name: acquire(store, name)[0] for name in ("a", "b")}

    def failing_sync():
        raise StoreError("the disk went away")

    monkeypatch.setattr(store, "sync", failing_sync)
    committer = Committer(store, "sync")
    errors = {}

    async def submit(name):
        try:
            await committer.submit(Append(name, epochs[name], [(1, step())]))
        except StoreError as exc:
            errors[name] = str(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(submit, "a")
        tg.start_soon(submit, "b")
    assert errors == {"a": "the disk went away", "b": "the disk went away"}
    store.close()


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_the_fsync_thread_exits_when_idle_and_comes_back_on_demand(tmp_path, monkeypatch):
    monkeypatch.setattr(_flusher, "_IDLE_EXIT", 0.05)
    monkeypatch.setattr(_flusher, "_INLINE_BELOW", 0.0)  # every fsync goes to the thread
    store = LmdbStore(tmp_path / "db")
    committer = Committer(store, "sync")
    create(store)
    epoch, _ = acquire(store)
    await committer.submit(Append("inv-1", epoch, [(1, step())]))
    thread = committer._flusher._thread
    assert thread is not None and thread.name == "journal-fsync"
    await until(lambda: not thread.is_alive(), "the idle fsync thread to exit")
    assert committer._flusher._thread is None
    await committer.submit(Append("inv-1", epoch, [(2, step())]))
    assert committer._flusher._thread is not None
    assert store.entry_count("inv-1") == 3
    store.close()


async def test_a_failed_start_of_the_fsync_thread_is_reported_and_the_next_fsync_starts_it(tmp_path, monkeypatch):
    import threading

    monkeypatch.setattr(_flusher, "_INLINE_BELOW", 0.0)
    store = LmdbStore(tmp_path / "db")
    committer = Committer(store, "sync")
    create(store)
    epoch, _ = acquire(store)
    real_start = threading.Thread.start

    def fail_once(self):
        monkeypatch.setattr(threading.Thread, "start", real_start)
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", fail_once)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        await committer.submit(Append("inv-1", epoch, [(1, step())]))
    with anyio.fail_after(60):  # not left waiting on a thread that never ran
        await committer.submit(Append("inv-1", epoch, [(2, step())]))
    assert store.entry_count("inv-1") == 3
    store.close()


class _WatchedSync:
    """Wraps a store's sync to record which thread ran each fsync, and to slow some down."""

    def __init__(self, store, monkeypatch):
        self.threads: list[str] = []
        self.delay = 0.0
        real = store.sync

        def sync():
            import threading
            import time

            self.threads.append(threading.current_thread().name)
            time.sleep(self.delay)
            real()

        monkeypatch.setattr(store, "sync", sync)


async def test_a_lone_append_is_fsynced_on_the_loop_until_the_disk_turns_slow(tmp_path, monkeypatch):
    import threading

    # A limit far above what this disk's real fsync takes, so that only the injected delay is slow.
    monkeypatch.setattr(_flusher, "_INLINE_BELOW", 0.05)
    store = LmdbStore(tmp_path / "db")
    watched = _WatchedSync(store, monkeypatch)
    committer = Committer(store, "sync")
    create(store)
    epoch, _ = acquire(store)
    loop_thread = threading.current_thread().name
    await committer.submit(Append("inv-1", epoch, [(1, step())]))
    assert watched.threads == [loop_thread]  # no round trip to another thread
    watched.delay = 0.2  # over the limit: this one still ran inline, the next ones may not
    await committer.submit(Append("inv-1", epoch, [(2, step())]))
    watched.delay = 0.0
    await committer.submit(Append("inv-1", epoch, [(3, step())]))
    assert watched.threads[-1] == "journal-fsync"
    # Quick fsyncs bring it back to the loop, gradually.
    seq = 4
    while watched.threads[-1] != loop_thread and seq < 200:
        await committer.submit(Append("inv-1", epoch, [(seq, step())]))
        seq += 1
    assert watched.threads[-1] == loop_thread and seq > 10  # 0.2 s decays under 0.05 s in 14 quick ones
    assert store.entry_count("inv-1") == seq
    store.close()


async def test_a_lone_appender_on_a_quick_disk_still_lets_the_loop_fire_its_timers(tmp_path, monkeypatch):
    # A handler making `sync` step after step, each fsynced on the loop, with no other task
    # ready: the leader skips the turn of the loop before its commit (it would only look for
    # I/O and timers), and `ctx.run` gives the loop its turn once due (`turn_due`, `turn`),
    # as this appender does; timers (a lease's renewal) still fire while it goes on.
    store = LmdbStore(tmp_path / "db")
    monkeypatch.setattr(store, "sync", lambda: None)  # the quickest disk: every fsync inline, at once,
    monkeypatch.setattr(_flusher, "_INLINE_BELOW", 60.0)  # even one the machine's load made look slow
    committer = Committer(store, "sync")
    create(store)
    epoch, _ = acquire(store)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await anyio.sleep(0.0001)  # a timer: due, it runs only when the loop takes a turn
            ticks += 1

    seq = 1
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        while ticks == 0:  # the ticker runs, asleep on its timer between ticks
            await anyio.lowlevel.checkpoint()
        ticks = 0
        while ticks < 3 and seq < 50_000:  # (a handler holding the loop would reach the cap)
            if committer.turn_due():
                await committer.turn()
            await committer.submit(Append("inv-1", epoch, [(seq, step())]))
            seq += 1
        tg.cancel_scope.cancel()
    assert ticks >= 3, f"the loop fired no timer in {seq - 1} appends"
    assert store.entry_count("inv-1") == seq
    store.close()


async def _batch_of_three(tmp_path, monkeypatch, *, busy: bool) -> _WatchedSync:
    """Three appends committed together, with (`busy`) or without a task beside them that is
    ready to run on every turn of the loop; which thread fsynced them."""
    store = LmdbStore(tmp_path / "db")
    watched = _WatchedSync(store, monkeypatch)
    committer = Committer(store, "sync")
    epochs = {}
    for name in ("a", "b", "c"):
        create(store, name)
        epochs[name], _ = acquire(store, name)
    done = False

    async def busy_beside():
        while not done:
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as outer:
        if busy:
            outer.start_soon(busy_beside)
        async with anyio.create_task_group() as tg:
            for name in ("a", "b", "c"):
                tg.start_soon(committer.submit, Append(name, epochs[name], [(1, step())]))
        done = True
    assert committer.batches == 1 and all(store.entry_count(name) == 2 for name in ("a", "b", "c"))  # started, step
    store.close()
    return watched


async def test_the_fsync_of_a_batch_leaves_the_loop_while_other_work_is_ready(tmp_path, monkeypatch):
    watched = await _batch_of_three(tmp_path, monkeypatch, busy=True)
    assert watched.threads == ["journal-fsync"]


async def test_the_fsync_of_a_batch_that_every_ready_task_joined_runs_on_the_loop(tmp_path, monkeypatch):
    import threading

    monkeypatch.setattr(_flusher, "_INLINE_BELOW", 0.05)  # this disk's fsyncs count as quick
    watched = await _batch_of_three(tmp_path, monkeypatch, busy=False)
    assert watched.threads == [threading.current_thread().name]  # the loop had nothing else to do


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_failed_inline_fsync_fails_its_append_and_the_next_one_commits(tmp_path, monkeypatch):
    store = LmdbStore(tmp_path / "db")
    create(store)
    epoch, _ = acquire(store)
    failures = [StoreError("the disk went away")]
    real_sync = store.sync

    def sync_failing_once():
        if failures:
            raise failures.pop()
        real_sync()

    monkeypatch.setattr(store, "sync", sync_failing_once)
    committer = Committer(store, "sync")  # its fsyncs call the patched sync
    with pytest.raises(StoreError, match="the disk went away"):
        await committer.submit(Append("inv-1", epoch, [(1, step())]))
    await committer.submit(Append("inv-1", epoch, [(2, step())]))
    assert store.entry_count("inv-1") == 3
    store.close()


async def test_a_store_of_ones_own_that_implements_apply_gets_apply_one_from_the_protocol():
    from journal import Store

    class Recording(Store):
        """A store written against the protocol: it implements `apply`, not `apply_one`."""

        def __init__(self):
            self.inner = MemoryStore()
            self.applied = []

        def apply(self, ops):
            self.applied.extend(type(op).__name__ for op in ops)
            return self.inner.apply(ops)

        def sync(self):
            pass

    store = Recording()
    create(store.inner)
    epoch, _ = acquire(store.inner)
    committer = Committer(store, "async")
    await committer.submit(Append("inv-1", epoch, [(1, step())]))
    with pytest.raises(LeaseLost):
        await committer.submit(Append("inv-1", epoch + 1, [(2, step())]))
    assert store.applied == ["Append", "Append"]
    assert store.inner.entry_count("inv-1") == 2


async def test_invocations_created_beside_a_batch_of_acquires_are_fsynced_before_create_returns(tmp_path):
    import os

    from journal import HOST, Acquire, InvocationRecord, Started, Status, digest, encode_entry, encode_value

    store = LmdbStore(tmp_path / "db")
    synced = []
    real_sync = store.sync
    store.sync = lambda: (synced.append(1), real_sync())
    committer = Committer(store, "sync")
    create(store, "running")
    fsyncs_at_return = {}

    async def take():  # first in: it leads a batch that alone would not be fsynced
        await committer.submit_batched(Acquire("running", "me", HOST, os.getpid(), 10**9, 1))

    async def start(i):
        raw = encode_value(i)
        record = InvocationRecord(f"new-{i}", "pkg.mod:agent", Status.PENDING, 1, 1, None, digest(bytes(raw)))
        await committer.create(record, encode_entry(Started("pkg.mod:agent", raw, 1)))
        fsyncs_at_return[i] = len(synced)  # reported started: it must be on disk by now

    async with anyio.create_task_group() as tg:
        tg.start_soon(take)
        for i in range(20):
            tg.start_soon(start, i)
    assert fsyncs_at_return == {i: 1 for i in range(20)} and committer.batches == 1
    assert all(store.get(f"new-{i}").status == Status.PENDING for i in range(20))
    store.close()


async def test_a_blocking_store_that_does_not_declare_loop_commits_is_committed_on_a_thread():
    import threading

    from .helpers import NetworkStore

    class Threaded(NetworkStore):
        capabilities = frozenset()  # no Capability.LOOP_COMMITS: apply_async is not its to answer

        async def apply_async(self, ops, *, durable=True, deferred=None):
            raise AssertionError("apply_async called on a store that did not declare loop commits")

        def apply(self, ops, *, durable=True):
            self.applied_on = threading.current_thread()
            return super().apply(ops, durable=durable)

    store = Threaded()
    create(store)
    epoch, _ = acquire(store)
    committer = Committer(store, "sync")
    assert await committer.submit(Append("inv-1", epoch, [(1, step("a"))])) is None
    assert store.applied_on is not threading.current_thread() and store.entry_count("inv-1") == 2
