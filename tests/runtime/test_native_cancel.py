"""Cancellations landing in the middle of a group commit.

A native asyncio cancellation (`task.cancel()`, `asyncio.wait_for`, `asyncio.timeout`)
goes through anyio's shields. It must neither leave an invocation leased to a run that is
gone nor leave the batch open, which would hang every later operation of the engine. An
anyio cancellation of a run whose last write is committing lets the write end and the
run report it, as a shield would."""

import asyncio
import threading

import anyio
import pytest

from journal import LmdbStore, Status, now_us
from journal.commit import _flusher
from runtime import Context, Engine

from ..waiting import DEADLINE, until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(autouse=True)
def _fsyncs_on_their_thread(monkeypatch):
    """Every fsync on the committer's thread, as on a disk that has been slow lately: most of
    these tests hold a batch's fsync and cancel runs while it is held, which needs the loop
    free meanwhile (a quick disk's batch that every ready task has joined is fsynced on the
    loop); the others cancel while a batch's fsync is under way on the thread."""
    monkeypatch.setattr(_flusher, "_INLINE_BELOW", 0.0)


async def agent(ctx: Context, q: str) -> str:
    return await ctx.run("plan", lambda: f"plan for {q}")


def _held_fsync(tmp_path):
    """A store whose fsyncs wait for `release` (until it is set), and `syncing`, set when
    the first one starts waiting."""
    store = LmdbStore(tmp_path / "db")
    syncing, release = threading.Event(), threading.Event()
    real_sync = store.sync

    def held_sync():
        if not release.is_set():
            syncing.set()
            if not release.wait(DEADLINE):
                release.set()  # (a test failed meanwhile: its engine closes without a deadline per fsync)
        real_sync()

    store.sync = held_sync
    return store, syncing, release


async def _start_runs(engine, syncing, names):
    """Two runs whose creations make the first group commit, held in its fsync; behind it,
    the runs of `names`, whose creations fill the next batch in that order (the first leads)."""
    tasks = {name: asyncio.create_task(engine.run(agent, name, id=name)) for name in ("first", "second")}
    await until(syncing.is_set, "the first batch's fsync")
    for i, name in enumerate(names, start=1):
        tasks[name] = asyncio.create_task(engine.run(agent, name, id=name))
        await until(lambda i=i: engine.committer._filling is not None and len(engine.committer._filling.ops) == i,
                    f"{name}'s creation to join the batch being filled")
    return tasks


def _gated():
    """An event, and a handler that waits for it, then returns "done"."""
    gate = anyio.Event()

    async def gated(ctx: Context) -> str:
        await gate.wait()
        return "done"

    return gate, gated


async def _hold_last_write(engine, store, syncing, release, gate):
    """Once x (running `_gated`'s handler) has started: hold the next fsync behind a batch of
    two runs, open the next batch with "leader", and let x's final write join it."""
    # x's creation is committed before its fsync ends (on the thread): the hold must catch
    # the next batch's fsync, not that one's.
    await until(lambda: "x" in engine._running and store.get("x") is not None and engine.committer._in_flight is None,
                "x to start and its creation's fsync to end")
    release.clear()
    tasks = await _start_runs(engine, syncing, ["leader"])
    gate.set()
    await until(lambda: len(engine.committer._filling.ops) == 2, "x's last write to join the batch")
    return tasks


async def _settled(engine, store, cancelled, tasks):
    for name, task in tasks.items():
        if name == cancelled:
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            with anyio.fail_after(DEADLINE):  # a batch left open would hang them for ever
                outcome = await task
            assert outcome.status == Status.COMPLETED and outcome.result == f"plan for {name}"
    record = store.get(cancelled)
    # Created (its batch committed) but given back: pending, with no lease, runnable here at once.
    assert record is not None and record.status == Status.PENDING
    assert store.live_lease(cancelled, now_us()) is None and cancelled not in engine._running
    outcome = await engine.resume(cancelled)
    assert outcome.status == Status.COMPLETED and outcome.result == f"plan for {cancelled}"


@pytest.mark.parametrize("cancelled", ["follower", "leader"])
async def test_a_run_cancelled_natively_in_a_batch_keeps_no_lease_and_the_batch_commits(tmp_path, cancelled):
    # "follower" waits in the batch "leader" leads. Cancelling the follower must not leave
    # its invocation leased; cancelling the leader must not leave the batch open.
    store, syncing, release = _held_fsync(tmp_path)
    try:
        async with Engine.open(store=store) as engine:
            tasks = await _start_runs(engine, syncing, ["leader", "follower"])
            tasks[cancelled].cancel()  # its wake-up is queued on the loop before the fsync can end
            release.set()
            await _settled(engine, store, cancelled, tasks)
    finally:
        release.set()
        store.close()


async def test_a_run_whose_creation_s_flush_fails_does_not_keep_the_lease_it_committed(tmp_path):
    # The transaction that created the invocation and took its lease committed; the fsync
    # after it failed, so the run is told its creation failed. It must not leave the
    # invocation `running` under a lease nobody renews.
    from journal.errors import StoreError

    store = LmdbStore(tmp_path / "db")
    real_sync, failures = store.sync, [StoreError("the disk went away (a test's fsync)")]

    def failing_sync():
        if failures:
            raise failures.pop()
        real_sync()

    store.sync = failing_sync  # (before the engine's committer takes it)
    try:
        async with Engine.open(store=store) as engine:
            with pytest.raises(StoreError, match="disk went away"):
                await engine.run(agent, "q", id="unlucky")
            record = store.get("unlucky")
            assert record is not None and record.status == Status.PENDING
            assert store.live_lease("unlucky", now_us()) is None and "unlucky" not in engine._running
            outcome = await engine.resume("unlucky")
            assert outcome.status == Status.COMPLETED and outcome.result == "plan for q"
    finally:
        store.close()


async def test_a_run_cancelled_while_its_last_write_commits_returns_how_it_ended(tmp_path):
    # x's final write (its result and `completed`) waits in the batch "leader" leads, behind
    # a batch whose fsync is held, when x's cancel scope is cancelled. The write commits with
    # that batch, and `run` returns the outcome, not the cancellation: anyio's cancellation
    # is level-triggered, so it comes at the caller's next checkpoint (none here).
    store, syncing, release = _held_fsync(tmp_path)
    release.set()  # not held until x has started
    gate, gated = _gated()

    outcome = {}
    try:
        async with Engine.open(store=store) as engine:
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def run_x():
                    with scope:
                        outcome["x"] = await engine.run(gated, id="x")

                tg.start_soon(run_x)
                tasks = await _hold_last_write(engine, store, syncing, release, gate)
                scope.cancel()
                await anyio.lowlevel.checkpoint()
                release.set()
                for task in tasks.values():
                    await task
        assert scope.cancel_called and not scope.cancelled_caught
        assert outcome["x"].status == Status.COMPLETED and outcome["x"].result == "done"
        assert store.get("x").status == Status.COMPLETED and store.live_lease("x", now_us()) is None
    finally:
        release.set()
        store.close()


async def test_a_run_cancelled_while_its_creation_commits_gives_its_lease_back_and_runs_nothing(tmp_path):
    # "follower" is created, and takes its lease, in the batch "leader" leads, behind a
    # batch whose fsync is held, when its cancel scope is cancelled. The creation commits;
    # the run stops there: its handler makes no step, and the lease it took is given back.
    store, syncing, release = _held_fsync(tmp_path)
    outcome = {}
    try:
        async with Engine.open(store=store) as engine:
            tasks = await _start_runs(engine, syncing, ["leader"])
            scope = anyio.CancelScope()

            async def run_follower():
                with scope:
                    outcome["follower"] = await engine.run(agent, "follower", id="follower")

            follower = asyncio.create_task(run_follower())
            await until(lambda: len(engine.committer._filling.ops) == 2, "follower's creation to join the batch")
            scope.cancel()
            await anyio.lowlevel.checkpoint()
            release.set()
            await follower
            for task in tasks.values():
                await task
            assert scope.cancelled_caught and "follower" not in outcome
            record = store.get("follower")
            assert record is not None and record.status == Status.PENDING
            assert [seq for seq, _ in store.entries("follower")] == [0]
            assert store.live_lease("follower", now_us()) is None and "follower" not in engine._running
            resumed = await engine.resume("follower")
            assert resumed.status == Status.COMPLETED and resumed.result == "plan for follower"
    finally:
        release.set()
        store.close()


@pytest.mark.parametrize("first", ["native", "anyio"])
async def test_a_native_cancellation_landing_with_an_anyio_one_during_the_last_write_is_not_lost(tmp_path, first):
    # x's final write waits in a batch when its task is cancelled natively (`task.cancel()`,
    # as `asyncio.timeout` does) and its anyio scope is cancelled too, in the same moment.
    # asyncio folds the two into one exception; the anyio one alone would let the run
    # return its outcome (above), but the native one is delivered once and must end the
    # task. The write commits either way.
    store, syncing, release = _held_fsync(tmp_path)
    release.set()  # not held until x has started
    gate, gated = _gated()

    after_scope = []
    try:
        async with Engine.open(store=store) as engine:
            scope = anyio.CancelScope()

            async def run_x():
                with scope:
                    await engine.run(gated, id="x")
                after_scope.append(True)  # (reached only if the native cancellation was lost)
                await anyio.lowlevel.checkpoint()

            x = asyncio.create_task(run_x())
            tasks = await _hold_last_write(engine, store, syncing, release, gate)
            if first == "native":
                x.cancel()
                scope.cancel()
            else:
                scope.cancel()
                x.cancel()
            await anyio.lowlevel.checkpoint()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await x
            for task in tasks.values():
                await task
        assert after_scope == []
        assert store.get("x").status == Status.COMPLETED and store.live_lease("x", now_us()) is None
    finally:
        release.set()
        store.close()
