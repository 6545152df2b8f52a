"""Durable timers, recovery and the worker loop."""

import contextlib

import anyio
import pytest

from journal import Status, decode_entry, kind_of, now_us
from journal.errors import StoreError
from runtime import Context
from runtime._engine import _worker
from runtime._handler import _invocation

from ..waiting import DEADLINE, until

pytestmark = pytest.mark.anyio


async def test_a_short_sleep_is_journaled_and_waited_inline(open_engine):
    async def agent(ctx: Context) -> str:
        await ctx.sleep(0.05)
        return "woke"

    async with open_engine() as engine:
        start = anyio.current_time()
        out = await engine.run(agent, id="s")
        assert out.result == "woke" and anyio.current_time() - start >= 0.05
        entries = [decode_entry(d) for _, d in engine.store.entries("s")]
    assert kind_of(entries[1]) == "sleep" and entries[1].until - entries[1].at == 50_000


async def test_a_long_sleep_suspends_and_resumes_with_only_the_time_left(open_engine, calls, monkeypatch):
    async def agent(ctx: Context) -> str:
        await ctx.run("before", calls("before"))
        await ctx.sleep(3600)  # the early resume below comes long before it, however loaded the machine
        return await ctx.run("after", calls("after"))

    async with open_engine(inline_sleep_limit=0.1) as engine:
        out = await engine.run(agent, id="t")
        assert out.status == Status.SUSPENDED and out.wake_at is not None
        assert engine.store.lease("t").owner == ""
        early = await engine.resume("t")  # too early: replays, sees time left, suspends again
        assert early.status == Status.SUSPENDED
        # The hour passes: the clocks that the timer's wait and the worker's look read move on
        # by it (timers read the wall clock, not the engine's `clock=`).
        later = lambda: now_us() + 3_600_000_000  # noqa: E731
        monkeypatch.setattr(_invocation, "now_us", later)
        monkeypatch.setattr(_worker, "now_us", later)
        await until(lambda: engine.runnable() == ["t"], "the timer to fall due")
        done = await engine.resume("t")
    assert done.result == "after:()" and calls.counts == {"before": 1, "after": 1}


async def test_the_worker_wakes_due_timers_and_resolved_promises(open_engine, calls):
    async def sleeper(ctx: Context) -> str:
        await ctx.sleep(0.2)
        return await ctx.run("slept", calls("slept"))

    async def waiter(ctx: Context) -> str:
        return await ctx.promise("go")

    async with open_engine(inline_sleep_limit=0.05, poll_interval=0.02) as engine:
        assert (await engine.run(sleeper, id="sl")).status == Status.SUSPENDED
        assert (await engine.run(waiter, id="w")).status == Status.SUSPENDED
        await engine.resolve("w", "go", "went")
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.serve)
            await until(lambda: all(engine.store.get(i).finished for i in ("sl", "w")), "the worker to finish both")
            tg.cancel_scope.cancel()
        assert (await engine.get("sl")).result == "slept:()"
        assert (await engine.get("w")).result == "went"


async def test_recover_runs_pending_invocations(open_engine, calls):
    async def agent(ctx: Context, n: int) -> int:
        return await ctx.run("double", lambda: n * 2)

    async with open_engine() as engine:
        for i in range(5):
            await engine.start(agent, i, id=f"p{i}")
        outcomes = await engine.recover()
        assert sorted(o.result for o in outcomes) == [0, 2, 4, 6, 8]
        assert engine.runnable() == []


async def test_stopping_the_worker_leaves_in_flight_invocations_resumable(open_engine, calls):
    started = anyio.Event()

    async def slow(ctx: Context) -> str:
        await ctx.run("first", calls("first"))
        started.set()
        await ctx.run("long", anyio.sleep, 5)
        return "done"

    async with open_engine(poll_interval=0.02) as engine:
        await engine.start(slow, id="inflight")
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.serve)
            await started.wait()
            tg.cancel_scope.cancel()
        record = engine.store.get("inflight")
        assert record.status == Status.PENDING and engine.store.lease("inflight").owner == ""
        assert engine.runnable() == ["inflight"]
    assert calls.counts == {"first": 1}


async def test_serve_with_idle_exit_drains_the_queue(open_engine):
    async def agent(ctx: Context, n: int) -> int:
        return await ctx.run("inc", lambda: n + 1)

    async with open_engine(poll_interval=0.01) as engine:
        for i in range(20):
            await engine.start(agent, i, id=f"q{i}")
        await engine.serve(concurrency=4, idle_exit=True)
        assert all(engine.store.get(f"q{i}").status == Status.COMPLETED for i in range(20))


# A lease short enough for a test to outlive, long enough for a loaded machine: on two cores
# shared with other suites, creating 20 invocations on PostgreSQL took 0.3 s, a whole 0.3 s
# lease, before their handlers could start.
_TTL = 1.0


async def _a_rival_cannot_take_over(db, store, invocation_id):
    """Past the lease's current expiry, only its renewal keeps another engine out."""
    import time

    from runtime import Engine, InvocationBusy

    async def rival_handler(ctx: Context, *args: object) -> str:
        return "taken over"  # returns at once: a rival that got in fails the test, never hangs it

    first_expiry = store.lease(invocation_id).expires_at
    await until(lambda: time.time_ns() // 1000 > first_expiry, "the lease's first expiry to pass")
    async with Engine.open(db) as rival:
        with pytest.raises(InvocationBusy), anyio.fail_after(DEADLINE):
            await rival.resume(invocation_id, rival_handler)


async def _all_started(started, results):
    """Until every handler is busy in its wait; an execution that ended first (it lost its
    lease) fails the test at once rather than leaving it waiting for ever."""
    await until(lambda: results or all(event.is_set() for event in started), "every handler to start")
    assert not results, f"ended before its lease was checked: {results}"


async def test_the_owner_renews_its_lease_while_it_runs(open_engine, db):
    started, checked = anyio.Event(), anyio.Event()

    async def long(ctx: Context) -> str:
        await ctx.run("a", lambda: 1)
        started.set()
        await checked.wait()  # busy for longer than the lease's time to live
        return await ctx.run("b", lambda: "done")

    async with open_engine(lease_ttl=_TTL, poll_interval=0.02) as owner:
        async with anyio.create_task_group() as tg:
            results = []

            async def run():
                results.append(await owner.run(long, id="lease"))

            tg.start_soon(run)
            await _all_started([started], results)
            await _a_rival_cannot_take_over(db, owner.store, "lease")
            checked.set()
        assert results[0].result == "done"


async def test_one_watcher_renews_the_leases_of_many_concurrent_invocations(open_engine, db):
    started, checked = [anyio.Event() for _ in range(20)], anyio.Event()

    async def long(ctx: Context, i: int) -> int:
        await ctx.run("a", lambda: 1)
        started[i].set()
        await checked.wait()  # busy for longer than the lease's time to live
        return await ctx.run("b", lambda: i)

    async with open_engine(lease_ttl=_TTL, poll_interval=0.02) as owner:
        async with anyio.create_task_group() as tg:
            results = {}

            async def run(i):
                results[i] = await owner.run(long, i, id=f"lease-{i}")

            for i in range(20):
                tg.start_soon(run, i)
            await _all_started(started, results)
            # Started at different moments, each lease is renewed before it would expire.
            for i in (0, 7, 19):
                await _a_rival_cannot_take_over(db, owner.store, f"lease-{i}")
            checked.set()
        assert {i: r.result for i, r in results.items()} == {i: i for i in range(20)}, \
            sorted({(r.status, str(r.error)) for r in results.values()})  # (how they ended, if not so)


async def test_a_cancel_request_from_another_engine_reaches_only_its_invocation(open_engine, db, calls):
    started = [anyio.Event() for _ in range(5)]

    async def agent(ctx: Context, i: int) -> str:
        await ctx.run("first", calls("first"))
        started[i].set()
        await ctx.sleep(600)  # waited here (under the inline limit): a cancel request wakes it
        return await ctx.run("second", calls("second"))

    async with open_engine(poll_interval=0.02, inline_sleep_limit=3600) as engine:
        results = {}
        async with anyio.create_task_group() as tg:

            async def run(i):
                results[i] = await engine.run(agent, i, id=f"c-{i}")

            for i in range(5):
                tg.start_soon(run, i)
            for event in started:
                await event.wait()
            from runtime import Engine

            async with Engine.open(db) as other:  # another process's engine, on the same store
                await other.cancel("c-2", run=False)
            with anyio.fail_after(DEADLINE):  # not the full ten minutes
                await until(lambda: 2 in results, "the cancel to reach c-2")
            tg.cancel_scope.cancel()  # the others stop here, still sleeping, and stay resumable
        statuses = {i: engine.store.get(f"c-{i}").status for i in range(5)}
    assert results[2].status == Status.CANCELLED
    assert statuses == {0: Status.PENDING, 1: Status.PENDING, 2: Status.CANCELLED, 3: Status.PENDING,
                        4: Status.PENDING}
    assert calls.counts == {"first": 5}


@contextlib.contextmanager
def _failing_reads(engine, message, *, when=lambda: True, once=False):
    """Make `store.get`, the lease watcher's read, raise StoreError(message) while `when()` holds.

    Yields an event set at the first failure once the read is back on the event loop (a
    blocking store reads on a thread): the watcher has recorded the failure by the time a
    task waiting on the event runs, since it records it before it next awaits."""
    store, committer = engine.store, engine.committer
    real_get, real_read, failed, raised = store.get, committer.read, anyio.Event(), []

    def get(invocation_id):
        if when() and not (once and raised):
            raised.append(1)
            raise StoreError(message)
        return real_get(invocation_id)

    async def read(fn, *args):
        try:
            return await real_read(fn, *args)
        finally:
            if raised and not failed.is_set():
                failed.set()

    store.get, committer.read = get, read
    try:
        yield failed
    finally:
        store.get, committer.read = real_get, real_read


async def test_a_store_failure_seen_by_the_lease_watcher_stops_the_handler_with_that_error(open_engine, calls):
    started, failed = anyio.Event(), []

    async def agent(ctx: Context) -> str:
        await ctx.run("a", calls("a"))
        started.set()
        await failed[0].wait()  # busy outside the journal while the watcher's read fails
        return await ctx.run("b", calls("b"))

    async with open_engine(poll_interval=0.02) as engine:
        with _failing_reads(engine, "the store went away", when=started.is_set) as failure:
            failed.append(failure)
            with pytest.raises(StoreError, match="the store went away"):
                await engine.run(agent, id="w")
        # Nothing was decided about the handler: it stays resumable, and step "b" never ran.
        assert engine.store.get("w").status == Status.PENDING
    assert calls.counts == {"a": 1}


async def test_a_store_failure_seen_by_the_lease_watcher_wakes_a_waiting_sleep(open_engine):
    async def agent(ctx: Context) -> str:
        await ctx.sleep(3600)  # waited inline (under the inline sleep limit)
        return "woke"

    async with open_engine(poll_interval=0.02, inline_sleep_limit=7200) as engine:
        with _failing_reads(engine, "the store went away"), anyio.fail_after(DEADLINE):  # not the full hour
            with pytest.raises(StoreError, match="the store went away"):
                await engine.run(agent, id="w")
        assert engine.store.get("w").status == Status.PENDING


async def test_a_run_that_returns_after_the_lease_watcher_failed_is_not_completed(open_engine, calls):
    armed, failed = [], []

    async def agent(ctx: Context) -> str:
        await ctx.run("a", calls("a"))
        armed.append(1)
        if failed[0] is not None:  # not on the resume below
            await failed[0].wait()  # the watcher fails meanwhile; the handler makes no more context calls
            failed[0] = None
        return "done"

    async with open_engine(poll_interval=0.02) as engine:
        with _failing_reads(engine, "a read failed", when=lambda: bool(armed), once=True) as failure:
            failed.append(failure)
            with pytest.raises(StoreError, match="a read failed"):
                await engine.run(agent, id="w")
        assert engine.store.get("w").status == Status.PENDING
        assert (await engine.resume("w")).result == "done"  # resumable: the step replays
    assert calls.counts == {"a": 1}


async def test_the_lease_is_still_renewed_while_a_step_runs_after_the_watcher_failed_to_read(open_engine, db):
    in_step, checked = anyio.Event(), anyio.Event()

    async def long_step() -> str:
        in_step.set()
        await checked.wait()  # runs for longer than the lease's time to live
        return "done"

    async def agent(ctx: Context) -> str:
        return await ctx.run("long", long_step)

    async with open_engine(lease_ttl=0.3, poll_interval=0.02) as owner:
        with _failing_reads(owner, "reads fail", when=in_step.is_set):
            async with anyio.create_task_group() as tg:
                errors = []

                async def run():
                    try:
                        await owner.run(agent, id="lease")
                    except StoreError as exc:
                        errors.append(str(exc))

                tg.start_soon(run)
                await in_step.wait()
                await _a_rival_cannot_take_over(db, owner.store, "lease")
                checked.set()
        assert errors == ["reads fail"]


async def test_serve_with_idle_exit_returns_when_the_last_invocation_ends_without_waiting_out_a_poll(
        open_engine, monkeypatch):
    import threading

    gate = anyio.Event()

    async def agent(ctx: Context) -> str:
        await gate.wait()  # still running when the worker first finds nothing else to do
        return await ctx.run("done", lambda: "done")

    released = threading.Event()
    # The wait for new work never ends by itself here (an hour's poll, a NOTIFY that never
    # comes): only the end of the last invocation can let the worker go.
    async with open_engine(poll_interval=3600) as engine:
        monkeypatch.setattr(engine.store, "wait_for_work", lambda timeout: released.wait(3600))
        await engine.start(agent, None, id="last")
        try:
            with anyio.fail_after(DEADLINE):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: engine.serve(idle_exit=True))
                    await until(lambda: engine.store.get("last").status == Status.RUNNING,
                                "the worker to run the invocation")
                    gate.set()
        finally:
            released.set()
        assert engine.store.get("last").status == Status.COMPLETED
