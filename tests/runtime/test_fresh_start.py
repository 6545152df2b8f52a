"""`Engine.run` on an invocation it creates uses the entry 0 it wrote instead of reading the
journal back; on one that existed it reads and replays the journal as always."""

import anyio
import pytest

from journal import Status, decode_entry, decode_value, kind_of, now_us
from runtime import Context

pytestmark = pytest.mark.anyio


def _watch_journal_reads(store, events):
    read = store.entries

    def entries(invocation_id, *args, **kwargs):
        events.append(("read", invocation_id))
        return read(invocation_id, *args, **kwargs)

    store.entries = entries


async def test_a_run_that_creates_its_invocation_runs_before_reading_its_journal(open_engine):
    events: list[tuple[str, str]] = []

    def plan(q: str) -> str:
        events.append(("step", q))
        return f"plan for {q}"

    async def agent(ctx: Context, q: str) -> str:
        return await ctx.run("plan", plan, q)

    async with open_engine() as engine:
        _watch_journal_reads(engine.store, events)
        outcome = await engine.run(agent, "question", id="fresh")
        journal = [decode_entry(d) for _, d in engine.store.entries("fresh")]
    assert outcome.status == Status.COMPLETED and outcome.result == "plan for question"
    # The first execution ran its step with the journal it wrote itself (always-replay may
    # read it afterwards, to replay).
    assert events[0] == ("step", "question")
    assert [kind_of(e) for e in journal] == ["started", "step", "completed"]
    assert decode_value(journal[0].input) == "question"


async def test_a_run_that_attaches_to_an_invocation_reads_and_replays_its_journal(open_engine, calls):
    plan, act = calls("plan"), calls("act")

    async def agent(ctx: Context, q: str) -> str:
        first = await ctx.run("plan", plan, q)
        go = await ctx.promise("go", type=str)
        return f"{first} {go} {await ctx.run('act', act, q)}"

    async with open_engine() as engine:
        first = await engine.run(agent, "q", id="attach")
        assert first.status == Status.SUSPENDED
        await engine.resolve("attach", "go", "now")
        events: list[tuple[str, str]] = []
        _watch_journal_reads(engine.store, events)
        outcome = await engine.run(agent, "q", id="attach")  # the same id and input: attaches
    assert outcome.status == Status.COMPLETED
    assert outcome.result == "plan:('q',) now act:('q',)"
    assert ("read", "attach") in events
    assert calls.counts == {"plan": 1, "act": 1}  # the recorded step replayed, not run again


async def test_a_run_after_start_reads_the_journal_start_wrote(open_engine, calls):
    plan = calls("plan")

    async def agent(ctx: Context, q: str) -> str:
        return await ctx.run("plan", plan, q)

    async with open_engine() as engine:
        await engine.start(agent, "q", id="started-first")
        events: list[tuple[str, str]] = []
        _watch_journal_reads(engine.store, events)
        outcome = await engine.run(agent, "q", id="started-first")
    assert outcome.status == Status.COMPLETED and outcome.result == "plan:('q',)"
    assert events[0] == ("read", "started-first")
    assert calls.counts == {"plan": 1}


def _watch_ops(store, seen):
    apply = store.apply

    def watched(ops, *args, **kwargs):
        seen.extend((type(op).__name__, getattr(op, "id", None) or op.record.id) for op in ops)
        return apply(ops, *args, **kwargs)

    store.apply = watched


async def test_a_run_that_creates_its_invocation_takes_its_lease_with_the_creation(open_engine, calls):
    plan = calls("plan")

    async def agent(ctx: Context, q: str) -> str:
        return await ctx.run("plan", plan, q)

    async with open_engine() as engine:
        seen: list[tuple[str, str]] = []
        _watch_ops(engine.store, seen)
        outcome = await engine.run(agent, "q", id="leased")
        again = await engine.run(agent, "q", id="leased")  # attaches: finished, nothing to lease
    assert outcome.status == again.status == Status.COMPLETED and calls.counts == {"plan": 1}
    kinds = [kind for kind, invocation_id in seen if invocation_id == "leased"]
    assert kinds[:2] == ["Create", "Append"]  # one transaction fewer per invocation started: Create took the lease


async def test_runs_cancelled_while_their_creation_commits_leave_their_invocations_runnable(open_engine, calls):
    # The second run's creation joins the first one's group commit and is cancelled while it
    # waits: whether or not it took the lease, the invocation must not stay leased to a run
    # that is gone (nor marked running in this engine).
    plan = calls("plan")

    async def agent(ctx: Context, q: str) -> str:
        return await ctx.run("plan", plan, q)

    async with open_engine() as engine:
        async def cancelled(invocation_id: str) -> None:
            with anyio.move_on_after(0):
                await engine.run(agent, invocation_id, id=invocation_id)

        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.run, agent, "first")
            for i in range(3):
                tg.start_soon(cancelled, f"cancelled-{i}")
        for i in range(3):
            record = engine.store.get(f"cancelled-{i}")
            # (Cancelled too late to stop it, a run may also have finished.)
            assert record is None or record.status in (Status.PENDING, Status.COMPLETED)
            if record is not None and record.status == Status.PENDING:
                assert engine.store.live_lease(f"cancelled-{i}", now_us()) is None
                outcome = await engine.resume(f"cancelled-{i}")
                assert outcome.status == Status.COMPLETED and outcome.result == f"plan:('cancelled-{i}',)"


async def test_a_run_cancelled_before_it_starts_runs_nothing_and_leaves_its_invocation_runnable(open_engine, calls):
    # The run's scope is cancelled before it is called. Its creation may commit all the
    # same (a batch it leads, or its own, makes no checkpoint); its handler never starts,
    # and whatever lease the creation took is given back at once.
    plan = calls("plan")

    async def agent(ctx: Context, q: str) -> str:
        return await ctx.run("plan", plan, q)

    async with open_engine() as engine:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await engine.run(agent, "q", id="x")
        assert scope.cancelled_caught and calls.counts == {}
        record = engine.store.get("x")
        assert record is None or record.status == Status.PENDING
        if record is not None:
            assert [seq for seq, _ in engine.store.entries("x")] == [0]
            assert engine.store.live_lease("x", now_us()) is None and "x" not in engine._running
        outcome = await engine.run(agent, "q", id="x")
    assert outcome.status == Status.COMPLETED and calls.counts == {"plan": 1}
