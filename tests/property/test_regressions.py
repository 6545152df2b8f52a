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


_twin_runs: list[str] = []  # every execution of a twin branch's step function, in order


def _twin_step(name: str) -> str:
    _twin_runs.append(name)
    return f"{name}-result"


async def twin_branches(ctx: Context, ran: list) -> dict:
    out = {}

    async def branch(name: str):
        await ctx.emit({"starting": True})  # the same operation in both branches
        out[name] = await ctx.run(name, _twin_step, name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(branch, "a")
        tg.start_soon(branch, "b")
    return dict(sorted(out.items()))  # the branches finish in any order


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_identical_first_operations_of_sibling_branches_replay_each_on_its_own_path(anyio_backend):
    # The journal a run leaves when branch "b" ran first (as trio may schedule it) and the
    # process died after b's step was committed: seq 1 is b's emit, seq 2 a's, seq 3 b's step.
    # Each spawned task starts from a position of its own (its parent's and its spawn index),
    # so a's emit can only replay seq 2, b's only seq 1, whatever order they run in now.
    from journal import Acquire, Append, Emitted, Renew, Step, digest, encode_entry, encode_value
    from runtime._replay._branches import spawn_token
    from runtime._replay._machine import position_after

    store = MemoryStore()
    engine = Engine(store)
    await engine.start(twin_branches, [], id="t")
    epoch, _ = store.apply_one(Acquire("t", "dead-process", "host", 1, 10**9, 0))
    emitted = encode_value({"starting": True})
    a, b = spawn_token(0, 0), spawn_token(0, 1)
    entries = [
        (1, encode_entry(Emitted(1, emitted, prev=b))),
        (2, encode_entry(Emitted(2, emitted, prev=a))),
        (3, encode_entry(Step("b", digest("b", ("b",), {}), 3, encode_value("b-result"),
                              prev=position_after(b, "emitted", None, None)))),
    ]
    store.apply_one(Append("t", epoch, entries))
    store.apply_one(Renew("t", epoch, 0, 0))
    _twin_runs.clear()
    outcome = await engine.resume("t")
    assert outcome.status == Status.COMPLETED, outcome.divergence
    assert outcome.result == {"a": "a-result", "b": "b-result"}
    assert _twin_runs == ["a"]  # b's committed step is replayed, not run again
    kinds = [(seq, type(entry).__name__) for seq, entry in _entries(store, "t")]
    assert kinds == [(0, "Started"), (1, "Emitted"), (2, "Emitted"), (3, "Step"), (4, "Step"), (5, "Completed")]


def _entries(store, invocation_id):
    from journal import decode_entry

    return [(seq, decode_entry(data)) for seq, data in store.entries(invocation_id)]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_twin_branches_survive_a_crash_at_every_write(backend):
    # A crash at each journal write, in the middle of the task group, then a resume: the
    # same journal and outcome as without a crash, and no committed step runs again.
    report = check_determinism(twin_branches, [], backend=backend)
    assert report.status == Status.COMPLETED and report.result == {"a": "a-result", "b": "b-result"}
    assert report.crash_points >= 6  # both sides of each write (emits share a commit with a step)


async def twin_branches_then_wait(ctx: Context, renamed: bool) -> dict:
    out = {}

    async def branch(name: str):
        await ctx.emit({"starting": True})
        out[name] = await ctx.run(f"{name}-renamed" if renamed else name, _twin_step, name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(branch, "a")
        tg.start_soon(branch, "b")
    await ctx.promise("go")
    return dict(sorted(out.items()))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_branch_that_no_longer_matches_its_recorded_path_diverges_before_its_step_runs(anyio_backend):
    # Decided from the journal alone: the entry recorded at a branch's position is another
    # step, so the invocation diverges at once, with nothing run and nothing written.
    import runtime._handler._handlers as runtime_handlers

    store = MemoryStore()
    engine = Engine(store)
    assert (await engine.run(twin_branches_then_wait, False, id="d")).status == Status.SUSPENDED
    before = _entries(store, "d")
    await engine.resolve("d", "go", True)
    _twin_runs.clear()
    # The same invocation resumed by code in which the branches' steps were renamed.
    path = before[0][1].handler
    original = runtime_handlers._by_path.get(path)

    async def renamed(ctx: Context, renamed: bool) -> dict:
        return await twin_branches_then_wait(ctx, True)

    runtime_handlers._by_path[path] = renamed
    try:
        outcome = await engine.resume("d")
    finally:
        if original is None:
            runtime_handlers._by_path.pop(path, None)
        else:
            runtime_handlers._by_path[path] = original
    assert outcome.status == Status.DIVERGED
    assert "journal has: step 'a'" in outcome.divergence or "journal has: step 'b'" in outcome.divergence
    assert _twin_runs == []
    assert len(_entries(store, "d")) == len(before)


async def untracked_tasks(ctx: Context, ran: list) -> str:
    import asyncio

    asyncio.get_running_loop().set_task_factory(None)  # hides the tasks it spawns from the runtime

    async def branch(name: str):
        await ctx.run(name, _twin_step, name)

    await asyncio.gather(branch("a"), branch("b"))
    return "done"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_concurrent_calls_from_tasks_the_runtime_cannot_see_are_refused_pointing_to_gather():
    _twin_runs.clear()
    outcome = await Engine(MemoryStore()).run(untracked_tasks, [], id="u")
    assert outcome.status == Status.FAILED
    assert "ctx.gather" in outcome.error.message and "same point" in outcome.error.message
    # The second branch's step never started (the first one's, on a step thread, may have
    # begun before the refusal cancelled it).
    assert "b" not in _twin_runs and _twin_runs in ([], ["a"])


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


async def two_gathers_in_a_row(ctx: Context) -> list:
    # No operation of the caller between the two: both are called at the same position.
    first = await ctx.gather(ctx.run("s0", lambda: 0), ctx.run("s1", lambda: 1))
    second = await ctx.gather(ctx.run("s2", lambda: 2), ctx.run("s3", lambda: 3))
    return first + second


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_two_gathers_at_one_position_keep_their_branches_apart_through_crashes(backend):
    # Found by the generated programs: the second gather's branches used to stand where the
    # first one's had, and a replay after a crash mixed their entries up.
    report = check_determinism(two_gathers_in_a_row, backend=backend)
    assert report.result == [0, 1, 2, 3] and report.crash_points > 0


async def two_branches(ctx: Context) -> list:
    out = []

    async def branch(name: str):
        out.append(await ctx.run(name, _twin_step, name))

    async with anyio.create_task_group() as tg:
        tg.start_soon(branch, "a")
        tg.start_soon(branch, "b")
    out.append(await ctx.run("after", _twin_step, "after"))
    return sorted(out)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_journal_recorded_when_task_group_branches_shared_their_parents_position_still_replays(anyio_backend):
    # Before spawned tasks had positions of their own, both branches' steps recorded the
    # parent's position (prev=0). Each branch still finds its own step there.
    from journal import Acquire, Append, Renew, Step, digest, encode_entry, encode_value

    store = MemoryStore()
    engine = Engine(store)
    await engine.start(two_branches, id="old")
    epoch, _ = store.apply_one(Acquire("old", "dead-process", "host", 1, 10**9, 0))
    entries = [
        (1, encode_entry(Step("b", digest("b", ("b",), {}), 1, encode_value("b-result"), prev=0))),
        (2, encode_entry(Step("a", digest("a", ("a",), {}), 2, encode_value("a-result"), prev=0))),
    ]
    store.apply_one(Append("old", epoch, entries))
    store.apply_one(Renew("old", epoch, 0, 0))
    _twin_runs.clear()
    outcome = await engine.resume("old")
    assert outcome.status == Status.COMPLETED, outcome.divergence
    assert outcome.result == ["a-result", "after-result", "b-result"]
    assert _twin_runs == ["after"]
