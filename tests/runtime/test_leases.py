"""The engine's one lease watcher (`runtime/_engine/_leases.py`): cancel requests made from another
process reach the executions it watches, including one it starts to watch mid-look; a
lease is renewed on the store's clock, which starts at the claim."""

import threading
import time

import anyio
import pytest

from journal import LmdbStore, RequestCancel, Status
from runtime import Context, Engine, InvocationBusy

from ..journal.helpers import NetworkStore
from ..waiting import DEADLINE, until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_a_cancel_made_while_a_claimed_invocation_reads_its_journal_reaches_it():
    # Another process asks to cancel "b" just after this engine claimed it, while the engine
    # reads b's journal (off the loop, as on PostgreSQL). Meanwhile the watcher sees the
    # store's cancel count change and reads the records of what it watches so far ("a"
    # only). b must still get the request within a poll, not a third of the lease's time
    # to live (here 20 minutes) later.
    store = NetworkStore()
    real_entries, real_get = store.entries, store.get
    cancelled, a_looked_at = threading.Event(), threading.Event()

    def get(invocation_id):
        if invocation_id == "a" and cancelled.is_set():
            a_looked_at.set()  # the watcher's look that followed the cancel request
        return real_get(invocation_id)

    def entries(invocation_id, start=0):
        if invocation_id == "b" and not cancelled.is_set():
            store.apply_one(RequestCancel("b", 1))  # "another process" (the count goes up)
            cancelled.set()
            assert a_looked_at.wait(DEADLINE), "the watcher never looked after the cancel request"
        return real_entries(invocation_id, start)

    store.get, store.entries = get, entries
    a_running, results = anyio.Event(), {}

    async def a(ctx: Context) -> str:
        a_running.set()
        await anyio.sleep_forever()  # watched, busy outside the journal
        return "never"

    async def b(ctx: Context) -> str:
        await ctx.sleep(3600)  # waited inline: a cancel request wakes it
        return "slept"

    async with Engine.open(store=store, lease_ttl=3600, poll_interval=0.02, inline_sleep_limit=7200) as engine:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: engine.run(a, id="a"))

            async def run_b():
                # Started first, then run: the run reads b's journal (one it has just created
                # itself needs no reading back).
                await engine.start(b, id="b")
                results["b"] = await engine.run(b, id="b")

            await a_running.wait()
            tg.start_soon(run_b)
            await until(lambda: "b" in results, "the cancel request to reach b")
            tg.cancel_scope.cancel()
    assert results["b"].status == Status.CANCELLED


def _watched_fleet(tmp_path, *names):
    """An LMDB store that lists the records read from it, an event per invocation of
    `names` set once its handler runs, and that handler: it sleeps an hour, inline, so
    that only a cancel request wakes it."""
    from journal import LmdbStore

    store = LmdbStore(tmp_path / "db")
    reads: list[str] = []
    real_get = store.get

    def get(invocation_id):
        reads.append(invocation_id)
        return real_get(invocation_id)

    store.get = get
    waiting = {name: anyio.Event() for name in names}

    async def agent(ctx: Context) -> str:
        waiting[ctx.invocation_id].set()
        await ctx.sleep(3600)
        return "slept"

    return store, reads, waiting, agent


def _engine_that_looks_when_told(store):
    # The watcher's own task would wait an hour between looks: the tests make them.
    return Engine.open(store=store, lease_ttl=3600, poll_interval=3600, inline_sleep_limit=7200)


async def test_the_watcher_reads_a_new_execution_s_record_only_when_a_cancel_may_have_slipped_by(tmp_path):
    # An execution whose lease was claimed with no look of the watcher in between needs no
    # read of its record: any cancel request made after the claim changes the count from
    # the one the watcher saw last. When one comes, the next look reads it and the handler
    # is cancelled. The looks are made here, one at a time (the watcher's own task would
    # wait an hour between them), after "first" has had the first look, which reads all.
    store, reads, waiting, agent = _watched_fleet(tmp_path, "first", "x")
    try:
        async with _engine_that_looks_when_told(store) as engine:
            look = engine._executor.leases._look_for_cancels
            async with anyio.create_task_group() as tg:
                outcome = {}

                async def run():
                    outcome["x"] = await engine.run(agent, id="x")

                tg.start_soon(lambda: engine.run(agent, id="first"))
                await waiting["first"].wait()
                await look()
                assert reads == ["first"]
                tg.start_soon(run)
                await waiting["x"].wait()
                for _ in range(3):
                    await look()
                assert reads == ["first"]
                store.apply_one(RequestCancel("x", 1))  # from "another process": the count goes up
                await look()
                await until(lambda: "x" in outcome, "the cancel request to reach x")
                tg.cancel_scope.cancel()
        assert outcome["x"].status == Status.CANCELLED and "x" in reads
    finally:
        store.close()


async def test_a_watcher_started_again_reads_no_record_until_the_count_changes(tmp_path):
    # The watcher's task ends with the last execution it watches; the next execution starts
    # another. The count of cancel requests it saw last still holds: a request made later
    # changes it. So the new task's first look reads no record (a fleet of 10,000 agents
    # paid a read of each at that look), and a request made after the restart still gets
    # through at the next look.
    store, reads, waiting, agent = _watched_fleet(tmp_path, "first", "y")
    try:
        async with _engine_that_looks_when_told(store) as engine:
            leases = engine._executor.leases
            outcome = {}
            async with anyio.create_task_group() as tg:
                async def run(invocation_id):
                    outcome[invocation_id] = await engine.run(agent, id=invocation_id)

                tg.start_soon(run, "first")
                await waiting["first"].wait()
                await leases._look_for_cancels()  # the first look of all reads what it watches
                assert reads == ["first"]
                store.apply_one(RequestCancel("first", 1))
                await leases._look_for_cancels()
                await until(lambda: "first" in outcome, "the cancel request to reach first")
                reads.clear()
                leases._loop = None  # as when the task ended with the last execution it watched
                tg.start_soon(run, "y")
                await waiting["y"].wait()
                await leases._look_for_cancels()
                assert reads == []
                store.apply_one(RequestCancel("y", 1))
                await leases._look_for_cancels()
                await until(lambda: "y" in outcome, "the cancel request to reach y")
                tg.cancel_scope.cancel()
        assert outcome["first"].status == Status.CANCELLED and outcome["y"].status == Status.CANCELLED
        assert reads == ["y"]
    finally:
        store.close()


async def test_a_lease_shorter_than_the_poll_interval_is_renewed_and_kept(tmp_path):
    # lease_ttl 0.3 s beside the default 0.25 s poll: the watcher must wake often enough to
    # renew it, and must not take a lease it has renewed in time for one that ran out.
    renewals = []

    async def outlive_the_first_lease(ctx) -> str:
        async def watch() -> int:
            store = ctx_store["store"]
            first = store.live_lease("long", _now_us()).expires_at
            while True:  # until the lease has been renewed past twice its first term
                lease = store.live_lease("long", _now_us())
                assert lease is not None, "the lease lapsed while its owner was running"
                if lease.expires_at >= first + 2 * 300_000:
                    renewals.append(lease.expires_at - first)
                    return lease.epoch
                await anyio.sleep(0.01)

        with anyio.fail_after(DEADLINE):
            await ctx.run("watch", watch)
        return await ctx.run("after", lambda: "still the owner")

    ctx_store = {}
    async with Engine.open(tmp_path / "db", lease_ttl=0.3) as engine:
        ctx_store["store"] = engine.store
        outcome = await engine.run(outlive_the_first_lease, id="long")
    assert outcome.status == Status.COMPLETED, outcome
    assert outcome.result == "still the owner" and renewals


def _now_us() -> int:
    return time.time_ns() // 1000


class _SlowDisk(LmdbStore):
    """An LMDB store on a disk whose every flush takes `flush` seconds (a busy disk, a
    network volume): the commits themselves are as quick as ever."""

    def __init__(self, path, flush: float) -> None:
        self.flush = flush  # (the store syncs once while it opens)
        super().__init__(path)

    def sync(self) -> None:
        time.sleep(self.flush)
        super().sync()


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_lease_claimed_behind_a_slow_flush_is_renewed_before_it_can_lapse(tmp_path):
    # `Engine.run` claims a new invocation's lease with its creation, and that commit is made
    # durable before the handler starts: here the flush takes 0.25 s of the lease's 0.3. The
    # store counts the lease from the claim, so the watcher must too: counted from when it
    # began to watch, the first renewal came 0.1 s after the lease had run out, and a rival
    # engine (another worker) took the invocation over from its live owner meanwhile.
    ttl = 0.3
    store = _SlowDisk(tmp_path / "db", flush=0.25)
    started, checked, left = anyio.Event(), anyio.Event(), []

    async def agent(ctx: Context) -> str:
        left.append(store.lease("slow").expires_at - _now_us())
        started.set()
        await checked.wait()  # busy, outside the journal, past the claim's term
        return "kept"

    async def rival_handler(ctx: Context) -> str:
        return "taken over"  # (returns at once: a rival that got in must not hang the test)

    try:
        async with Engine.open(store=store, lease_ttl=ttl, poll_interval=0.02) as owner, \
                Engine.open(store=store) as rival:
            outcome = {}
            with anyio.fail_after(DEADLINE):
                async with anyio.create_task_group() as tg:

                    async def run():
                        outcome["owner"] = await owner.run(agent, id="slow")

                    tg.start_soon(run)
                    await started.wait()
                    # The handler starts on a lease with most of its time to live left ...
                    assert left[0] > ttl * 1e6 / 2, f"the handler started with {left[0] / 1e3:.0f} ms of its lease left"
                    # ... and past the end of the claim's term, the owner still holds it.
                    claimed = store.get("slow").created_at
                    await until(lambda: _now_us() > claimed + ttl * 1e6, "the claim's term to end")
                    with pytest.raises(InvocationBusy):
                        await rival.resume("slow", rival_handler)
                    checked.set()
        assert outcome["owner"].status == Status.COMPLETED and outcome["owner"].result == "kept"
    finally:
        store.close()
