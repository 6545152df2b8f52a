"""Runtime bugs the determinism checker found, kept fixed."""

from __future__ import annotations

import anyio
import pytest

from journal import MemoryStore, Status
from runtime import Cancelled, Context, Engine
from runtime.testing import check_determinism


async def sleep_then_wait(ctx: Context, log: list) -> list:
    seen = []
    try:
        await ctx.sleep(0)
        seen.append("slept")
        await ctx.promise("go")
    except Cancelled:
        seen.append("cancelled")
        await ctx.run("undo", lambda n: n, len(seen))
        raise
    return seen


def test_cancel_delivered_after_a_finished_sleep_replays_at_the_same_operation():
    # The CancelReceived entry that follows a sleep used to be replayed as if it had cut the
    # sleep short, so after a crash the handler saw Cancelled one operation early and the
    # compensating step got other arguments than when recorded.
    report = check_determinism(sleep_then_wait, [], cancel="suspended", promises={"go": 1})
    assert report.status == Status.CANCELLED


async def long_timer(ctx: Context) -> str:
    try:
        await ctx.sleep(3600)
    except Cancelled:
        await ctx.run("undo", lambda: "undone")
        raise
    return "woke"


@pytest.mark.anyio
async def test_cancelling_an_invocation_suspended_on_a_durable_timer_delivers_cancelled():
    # It used to suspend again at once on resume (the timer was not due) and, since the
    # cancel request made it runnable, loop without end.
    engine = Engine(MemoryStore())
    assert (await engine.run(long_timer, id="t")).status == Status.SUSPENDED
    with anyio.fail_after(60):  # a hang guard
        outcome = await engine.cancel("t")
    assert outcome.status == Status.CANCELLED


def test_cancelling_a_timer_suspended_invocation_is_deterministic_under_crashes():
    report = check_determinism(long_timer, cancel="suspended")
    assert report.status == Status.CANCELLED and report.crash_points > 0


async def step_beside_clock(ctx: Context) -> str:
    async def read_clock():
        ctx.now()

    async def step():
        await ctx.run("a", lambda: "a")

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_clock)
        tg.start_soon(step)
    return "done"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # starts the branches in spawn order, every time
async def test_clock_read_in_a_branch_replays_beside_a_sibling_step_journaled_before_the_crash():
    # The journal a run can leave when the step's branch ran first and the process died
    # before the clock reading (buffered until the next append) was committed: seq 1 is the
    # step, and the now() is not journaled. On replay the clock branch is scheduled first.
    from journal import Acquire, Append, Renew, Step, digest, encode_entry, encode_value

    store = MemoryStore()
    engine = Engine(store)
    await engine.start(step_beside_clock, id="c")
    epoch, _ = store.apply_one(Acquire("c", "dead-process", "host", 1, 10**9, 0))
    step = Step("a", digest("a", (), {}), 1, encode_value("a"), prev=0)
    store.apply_one(Append("c", epoch, [(1, encode_entry(step))]))
    store.apply_one(Renew("c", epoch, 0, 0))  # the owner died: its lease no longer protects it
    outcome = await engine.resume("c")
    assert outcome.status == Status.COMPLETED, outcome.divergence


async def twin_branches(ctx: Context, ran: list) -> dict:
    out = {}

    async def branch(name: str):
        await ctx.emit({"starting": True})  # the same operation in both branches
        out[name] = await ctx.run(name, lambda: name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(branch, "a")
        tg.start_soon(branch, "b")
    return out


@pytest.mark.xfail(strict=True, reason=(
    "known runtime bug: identical operations that follow the same predecessor in sibling "
    "branches of a plain task group (ctx.gather gives each branch a token of its own) are "
    "interchangeable to the replayer, which gives a branch the first match, possibly its "
    "sibling's entry; the rest of that branch's recorded path is then orphaned (a committed "
    "step runs again, then the invocation diverges)"
))
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # starts the branches in spawn order, every time
async def test_identical_first_operations_of_sibling_branches_replay_each_on_its_own_path():
    # The journal a run leaves when branch "b" ran first (as trio may schedule it) and the
    # process died after b's step was committed: seq 1 is b's emit, seq 2 a's, seq 3 b's step.
    from journal import Acquire, Append, Emitted, Renew, Step, digest, encode_entry, encode_value

    store = MemoryStore()
    engine = Engine(store, divergence_wait=0.05)
    await engine.start(twin_branches, [], id="t")
    epoch, _ = store.apply_one(Acquire("t", "dead-process", "host", 1, 10**9, 0))
    emitted = encode_value({"starting": True})
    entries = [
        (1, encode_entry(Emitted(1, emitted, prev=0))),
        (2, encode_entry(Emitted(2, emitted, prev=0))),
        (3, encode_entry(Step("b", digest("b", (), {}), 3, encode_value("b"), prev=1))),
    ]
    store.apply_one(Append("t", epoch, entries))
    store.apply_one(Renew("t", epoch, 0, 0))
    outcome = await engine.resume("t")
    assert outcome.status == Status.COMPLETED, outcome.divergence


def test_always_replay_starts_no_step_after_a_sibling_ended_the_round():
    # In always-replay mode a live step that leaves nothing in flight unwinds the handler to
    # replay it. A sibling branch resumed in the same scheduling round used to start its next
    # step function anyway, before the cancellation reached it, so that step ran twice.
    async def fan_out(ctx: Context) -> int:
        async def quick(name: str) -> None:
            await ctx.run(name, lambda: 1)

        async def then_slow() -> None:
            await ctx.run("first", lambda: 1)
            ctx.now()  # buffered: committed before the next step starts, which is an await
            await ctx.run("slow", anyio.sleep, 0.001)

        async with anyio.create_task_group() as tg:
            tg.start_soon(quick, "a")
            tg.start_soon(then_slow)
            tg.start_soon(quick, "b")
        return 1

    report = check_determinism(fan_out, engine_options={"always_replay": True})
    assert report.status == Status.COMPLETED
