"""A plain step function runs off the event loop (on the engine's step threads), so a
blocking call holds up no other invocation and no lease renewal; `inline=True` keeps one
on the loop; `timeout=` bounds a plain function too; `current_step()` works inside it."""

import functools
import os
import threading
from typing import Any

import anyio
import pytest

from journal import Status
from runtime import Context, RetryPolicy, StepTimeout, current_step

from ..waiting import DEADLINE, until, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.anyio


async def test_a_blocking_plain_step_holds_up_no_other_invocation(open_engine):
    others_done = threading.Event()

    def blocking_sdk_call() -> bool:
        # A synchronous client waiting on the network: returns whether the other
        # invocation finished while it waited (it cannot, if this blocks the loop).
        return others_done.wait(timeout=30)

    async def slow(ctx: Context) -> bool:
        return await ctx.run("llm", blocking_sdk_call)

    async def quick(ctx: Context) -> int:
        for i in range(10):
            await ctx.run(f"step-{i}", lambda i=i: i)
        others_done.set()
        return 10

    async with open_engine() as engine:
        await engine.start(slow, id="slow")
        await engine.start(quick, id="quick")
        outcomes = {o.id: o for o in await engine.recover()}
    assert outcomes["quick"].result == 10
    assert outcomes["slow"].status == Status.COMPLETED and outcomes["slow"].result is True


async def test_the_lease_is_renewed_while_a_plain_step_blocks_past_its_ttl(open_engine):
    release = threading.Event()

    def hold() -> str:
        release.wait(timeout=60)
        return "done"

    async def agent(ctx: Context) -> str:
        return await ctx.run("hold", hold)

    async with open_engine(lease_ttl=0.6, poll_interval=0.02) as engine:
        async def watch_renewals():
            first = await until_leased(engine, "a")
            # Renewed twice past its first expiry: the loop kept running the lease watcher.
            await until(lambda: engine.store.lease("a").expires_at > first + 1_200_000, "two renewals")
            release.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_renewals)
            outcome = await engine.run(agent, id="a")
    assert outcome.result == "done" and outcome.status == Status.COMPLETED


async def until_leased(engine, invocation_id):
    await until(lambda: (lease := engine.store.lease(invocation_id)) is not None and lease.owner, "the lease")
    return engine.store.lease(invocation_id).expires_at


async def test_a_timeout_bounds_a_plain_step_function(open_engine):
    release = threading.Event()

    def never_answers() -> str:
        release.wait(timeout=60)
        return "late"

    async def agent(ctx: Context) -> str:
        try:
            return await ctx.run("call", never_answers, timeout=0.2, retry=RetryPolicy(max_attempts=1))
        finally:
            release.set()  # the abandoned thread ends

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="t")
    assert outcome.status == Status.FAILED and outcome.error.type == "StepTimeout"
    assert StepTimeout.__name__ in outcome.error.type


async def test_current_step_works_on_the_step_thread_and_inline_stays_on_the_loop(open_engine):
    loop_thread = threading.get_ident()

    def where() -> list:
        info = current_step()
        return [info.name, info.attempt, threading.get_ident() == loop_thread]

    async def agent(ctx: Context) -> list:
        return [await ctx.run("threaded", where), await ctx.run("inline", where, inline=True)]

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="w")
    assert outcome.result == [["threaded", 1, False], ["inline", 1, True]]


async def test_what_a_plain_step_raises_on_its_thread_is_the_steps_failure(open_engine):
    def refuses() -> str:
        raise ValueError("no such order: 42")

    def exhausted() -> str:
        raise StopIteration  # an iterator run dry inside a step: not something an awaitable may carry

    async def agent(ctx: Context) -> list:
        out = []
        for name, fn in (("refuses", refuses), ("exhausted", exhausted)):
            try:
                await ctx.run(name, fn, retry=RetryPolicy(max_attempts=1))
            except Exception as exc:
                out.append(f"{type(exc).__name__}: {exc}")
        return out

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="raises")
    assert outcome.status == Status.COMPLETED
    assert outcome.result[0].endswith("no such order: 42")
    assert "StopIteration" in outcome.result[1]


# The hand-offs between the event loop and a thread, run many thousand times on both event
# loops: a result that reaches its waiting task late, or never (a lost wake-up), stalls the
# run here, and the deadline turns that stall into a failure. Threads are made to exit
# after a moment without work, so that calls keep arriving while threads decide to exit.
_HAND_OFFS = 5000
_AT_ONCE = 40


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_thousands_of_plain_step_results_each_reach_their_waiting_task(monkeypatch):
    from runtime._handler import _step_threads

    monkeypatch.setattr(_step_threads, "_IDLE_EXIT", 0.0005)
    threads = _step_threads.StepThreads(limit=4)  # fewer threads than callers: some calls queue

    def work(i: int) -> int:
        if i % 97 == 0:
            raise ValueError(i)
        return i * 2

    got: dict[int, object] = {}

    async def call(i: int) -> None:
        try:
            got[i] = await threads.run(lambda: work(i))
        except ValueError as exc:
            got[i] = exc.args[0]

    with anyio.fail_after(DEADLINE):
        for start in range(0, _HAND_OFFS, _AT_ONCE):
            async with anyio.create_task_group() as tg:
                for i in range(start, start + _AT_ONCE):
                    tg.start_soon(call, i)
    assert got == {i: i if i % 97 == 0 else i * 2 for i in range(_HAND_OFFS)}


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_thousands_of_flushes_handed_to_the_flush_thread_each_wake_their_caller(monkeypatch):
    from journal.commit import _flusher

    monkeypatch.setattr(_flusher, "_IDLE_EXIT", 0.0005)
    flushes = []
    flusher = _flusher.Flusher(lambda: flushes.append(1))

    async def flush() -> None:
        await flusher.run()  # (not `alone`: always on the thread)

    with anyio.fail_after(DEADLINE):
        for _ in range(0, _HAND_OFFS, _AT_ONCE):
            async with anyio.create_task_group() as tg:
                for _ in range(_AT_ONCE):
                    tg.start_soon(flush)
    assert len(flushes) == _HAND_OFFS


async def test_hundreds_of_short_invocations_each_finish_while_the_watcher_comes_and_goes(open_engine):
    # Two plain steps each (four hand-offs to a thread and back, with their commits), under a
    # lease short enough that renewals fall due during the run; the watcher's task ends with
    # the last execution it watches and starts again with the next one.
    async def agent(ctx: Context, i: int) -> int:
        a = await ctx.run("a", lambda: i)
        return await ctx.run("b", lambda: a + 1)

    # 2 s: renewals (after two thirds of a second) still fall due in the run, and a loop starved
    # for a second by a loaded machine (seen with parallel test processes) loses no lease.
    async with open_engine(lease_ttl=2.0, poll_interval=0.01) as engine:
        outcomes = {}

        async def run(i: int) -> None:
            outcomes[i] = await engine.run(agent, i, id=f"h{i}")

        with anyio.fail_after(DEADLINE):
            for start in range(0, 300, 30):
                async with anyio.create_task_group() as tg:
                    for i in range(start, start + 30):
                        tg.start_soon(run, i)
    assert {i: (o.status, o.result) for i, o in outcomes.items()} == {
        i: (Status.COMPLETED, i + 1) for i in range(300)}


async def test_plain_steps_beyond_the_thread_limit_all_complete_and_none_waits_behind_a_blocking_one(open_engine):
    # Two threads: one held by a blocking call for the whole run, the other running forty
    # invocations' plain steps one after another. A queued step never waits behind the
    # blocking one while a thread is free.
    others_done = threading.Event()

    async def slow(ctx: Context) -> bool:
        return await ctx.run("llm", lambda: others_done.wait(timeout=DEADLINE))

    async def quick(ctx: Context, i: int) -> int:
        a = await ctx.run("a", lambda: i)
        return await ctx.run("b", lambda: a * 2)

    async with open_engine(step_threads=2) as engine:
        await engine.start(slow, id="slow")
        outcomes = {}

        async def run(i: int) -> None:
            outcomes[i] = await engine.run(quick, i, id=f"q{i}")

        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                for i in range(40):
                    tg.start_soon(run, i)
        others_done.set()
        slow_outcome = await engine.run(slow, id="slow")
    assert {i: o.result for i, o in outcomes.items()} == {i: i * 2 for i in range(40)}
    assert slow_outcome.result is True


async def test_async_steps_go_on_while_every_step_thread_is_blocked(open_engine):
    release = threading.Event()
    running = threading.Event()

    def hold() -> str:
        running.set()
        release.wait(timeout=DEADLINE)
        return "held"

    async def blocked(ctx: Context) -> str:
        return await ctx.run("hold", hold)

    async def count(ctx: Context) -> int:
        async def one(i: int) -> int:
            return i

        return sum([await ctx.run(f"s{i}", one, i) for i in range(10)])

    async with open_engine(step_threads=1) as engine:
        held = []

        async def run_blocked() -> None:
            held.append(await engine.run(blocked, id="blocked"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_blocked)
            await until(running.is_set, "the blocking step to run")
            counted = await engine.run(count, id="count")  # the only step thread is held meanwhile
            release.set()
    assert counted.status == Status.COMPLETED and counted.result == 45
    assert held[0].result == "held"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_call_cancelled_while_queued_never_runs():
    from runtime._handler._step_threads import StepThreads

    threads = StepThreads(limit=1)
    release, running = threading.Event(), threading.Event()
    ran: list[str] = []

    def hold() -> str:
        running.set()
        release.wait(timeout=DEADLINE)
        return "held"

    async def first() -> None:
        assert await threads.run(hold) == "held"

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await until(running.is_set, "the only thread to be taken")
            with anyio.CancelScope() as scope:
                scope.cancel()  # cancelled as it waits: the call is still in the queue
                await threads.run(lambda: ran.append("queued"))
            release.set()
        assert await threads.run(lambda: "after") == "after"  # the thread is free again and took nothing else
    assert ran == []


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_calls_queued_behind_one_that_blocks_are_taken_by_another_thread():
    # Submitted in one turn of the loop, so one thread is woken for all of them; the one that
    # takes the blocking call has another thread take the rest before it begins.
    from runtime._handler._step_threads import StepThreads

    threads = StepThreads(limit=2)
    assert await threads.run(lambda: "warm") == "warm"  # a thread asleep, to be woken
    others_done = threading.Event()
    got: list[int] = []

    async def other(i: int) -> None:
        got.append(await threads.run(lambda: i))
        if len(got) == 5:
            others_done.set()

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(threads.run, lambda: others_done.wait(timeout=DEADLINE))
            for i in range(5):
                tg.start_soon(other, i)
    assert sorted(got) == list(range(5)) and others_done.is_set()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_event_loop_that_ran_plain_steps_is_not_kept_once_its_run_is_over(backend):
    import gc
    import weakref

    from runtime._handler._step_threads import StepThreads

    threads = StepThreads(limit=2)

    async def main() -> weakref.ref:
        assert await threads.run(lambda: 1) == 1
        if backend == "trio":
            import trio

            return weakref.ref(trio.lowlevel.current_trio_token())
        import asyncio

        return weakref.ref(asyncio.get_running_loop())

    loop = anyio.run(main, backend=backend)

    def freed() -> bool:
        gc.collect()
        return loop() is None

    # Not at once: the step thread that woke the loop for the result may still be inside the
    # loop's own `call_soon_threadsafe` as the run ends. But soon, and for good (the threads'
    # mailbox for it held it once: a loop kept for each run).
    wait_until(freed, "the event loop to be freed once its run is over")


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_quick_call_on_an_idle_loop_returns_and_raises_as_any_other():
    # On asyncio the loop's thread may wait for a quick call itself (docs/performance.md):
    # what the function returns or raises reaches the caller the same way.
    from runtime._handler._step_threads import StepThreads

    threads = StepThreads(limit=2)
    for _ in range(3):  # the first starts a thread; the next find it asleep, the loop idle
        assert await threads.run(lambda: "quick") == "quick"

    def refuses() -> None:
        raise ValueError("no such order: 42")

    def exhausted() -> None:
        raise StopIteration

    with pytest.raises(ValueError, match="no such order: 42"):
        await threads.run(refuses)
    with pytest.raises(RuntimeError, match="raised StopIteration"):
        await threads.run(exhausted)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_plain_call_that_needs_the_event_loop_to_finish_is_not_waited_for_on_it():
    # If the loop's thread waited for this call until it returned, the call would wait for
    # the loop for ever: the loop waits a moment at most, then goes on, and runs the callback.
    from runtime._handler._step_threads import StepThreads

    threads = StepThreads(limit=2)
    assert await threads.run(lambda: "warm") == "warm"
    token = anyio.lowlevel.current_token()

    def needs_the_loop() -> str:
        return anyio.from_thread.run_sync(lambda: "answered", token=token)  # returns once the loop ran it

    with anyio.fail_after(DEADLINE):
        assert await threads.run(needs_the_loop) == "answered"


async def test_quick_plain_steps_one_after_another_leave_the_loop_its_turns(open_engine):
    # In `exit` durability nothing else in a step waits; each plain step still gives the
    # loop a turn, so a task beside the handler (a lease renewal, another invocation) runs.
    turns = 0
    done = False

    async def beside() -> None:  # woken by a timer, as a lease renewal is
        nonlocal turns
        while not done:
            turns += 1
            await anyio.sleep(0.0001)

    async def agent(ctx: Context) -> int:
        await ctx.run("first", lambda: None)
        before = turns
        for i in range(200):  # 200 steps of 20 µs at the very least: 40 timers of 100 µs due
            await ctx.run(f"s{i}", lambda: None)
        return turns - before

    async with open_engine(durability="exit") as engine:
        async with anyio.create_task_group() as tg:
            tg.start_soon(beside)
            outcome = await engine.run(agent, id="quick")
            done = True
    assert outcome.status == Status.COMPLETED
    assert outcome.result >= 10, outcome.result


def _cpus_of_this_thread() -> set[int]:
    import os

    return os.sched_getaffinity(0)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_thread_woken_for_a_call_the_loop_waits_for_wakes_on_its_cpu_and_runs_the_call_on_all_of_its_own(
        monkeypatch):
    # docs/performance.md, "A step thread woken on the loop's CPU": the pin only chooses
    # where the thread wakes. The call, and a thread it starts (which would inherit a pin),
    # run with every CPU the process may use.
    import os

    from runtime._handler._step_threads import StepThreads

    allowed = os.sched_getaffinity(0)
    moves: list[tuple[int, set[int]]] = []
    move = os.sched_setaffinity

    def recorded(tid: int, cpus: Any) -> None:
        moves.append((tid, set(cpus)))
        move(tid, cpus)

    monkeypatch.setattr(os, "sched_setaffinity", recorded)
    threads = StepThreads(limit=1)  # one thread: every call below runs on it
    assert await threads.run(lambda: "warm") == "warm"

    def starts_a_thread() -> tuple[set[int], set[int]]:
        seen = {}
        started = threading.Thread(target=lambda: seen.update(cpus=os.sched_getaffinity(0)))
        started.start()
        started.join()
        return _cpus_of_this_thread(), seen["cpus"]

    seen = []
    for _ in range(20):
        await until(lambda: threads._sleepers, "the step thread to go to sleep")
        seen.append(await threads.run(starts_a_thread))
    assert seen == [(allowed, allowed)] * 20
    if len(allowed) > 1 and threads._pins.working:
        assert any(len(cpus) == 1 for _, cpus in moves), moves  # pinned for a wake-up
        assert moves[-1][1] == allowed  # and given its CPUs back once awake
    else:
        assert moves == []
    assert os.sched_getaffinity(0) == allowed  # the loop's own thread is never moved


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_quick_calls_go_on_where_no_thread_can_be_pinned(monkeypatch):
    # A Python without ctypes: nothing is pinned, and nothing else changes.
    import sys

    from runtime._handler._step_threads import StepThreads

    monkeypatch.setitem(sys.modules, "ctypes", None)
    threads = StepThreads(limit=1)
    with anyio.fail_after(DEADLINE):
        assert await threads.run(lambda: "first") == "first"
        for i in range(5):
            await until(lambda: threads._sleepers, "the step thread to go to sleep")
            assert await threads.run(functools.partial(int, i)) == i
    assert not threads._pins.working


def test_a_child_forked_from_a_process_that_ran_plain_steps_runs_its_own_on_threads_of_its_own(tmp_path):
    # After fork only the forking thread goes on: the child starts threads of its own
    # (before, its call waited for ever on the parent's), and never moves the parent's.
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import asyncio, os
        from runtime._handler._step_threads import StepThreads
        threads = StepThreads(limit=2)
        async def call():
            return await threads.run(lambda: os.getpid())
        assert asyncio.run(call()) == os.getpid()
        parent_thread = next(iter(threads._tids.values()))
        before = os.sched_getaffinity(parent_thread)
        child = os.fork()
        if child == 0:
            async def calls():
                return [await asyncio.wait_for(call(), 30) for _ in range(5)]
            os._exit(0 if asyncio.run(calls()) == [os.getpid()] * 5 else 3)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert os.sched_getaffinity(parent_thread) == before
        assert asyncio.run(call()) == os.getpid()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_call_that_outlasts_the_loops_wait_runs_on_with_all_the_process_may_use():
    import os

    from runtime._handler._step_threads import StepThreads

    allowed = os.sched_getaffinity(0)
    threads = StepThreads(limit=1)
    assert await threads.run(lambda: "warm") == "warm"
    await until(lambda: threads._sleepers, "the step thread to go to sleep")
    started, go = threading.Event(), threading.Event()

    def slow() -> set[int]:
        started.set()
        go.wait(timeout=DEADLINE)  # past the loop's wait: the loop went on meanwhile
        return _cpus_of_this_thread()

    got: list[set[int]] = []

    async def call() -> None:
        got.append(await threads.run(slow))

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await until(started.is_set, "the slow call to start")
            go.set()
    assert got == [allowed]
