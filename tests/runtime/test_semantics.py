"""DESIGN.md's semantics, rule by rule, on a real LMDB store."""

import asyncio

import anyio
import pytest

from journal import InvocationRecord, Status, decode_entry, decode_value, kind_of
from runtime import Cancelled, Context, InvocationConflict, PromiseRejected, TerminalError

from ..waiting import leases_lapsed

pytestmark = pytest.mark.anyio


def kinds(store, invocation_id):
    return [kind_of(decode_entry(d)) for _, d in store.entries(invocation_id)]


# 1. Append-only journal, entry 0 records the start.
async def test_entry_zero_records_handler_input_key_and_time(open_engine):
    async def agent(ctx: Context, q: str) -> str:
        return q

    async with open_engine() as engine:
        await engine.run(agent, "question", id="s", key="thread-1")
        started = decode_entry(engine.store.entries("s")[0][1])
    assert started.handler.endswith(".agent") and decode_value(started.input) == "question"
    assert started.key == "thread-1" and started.at > 0


# 2./3. Seq is taken at call time; concurrent steps replay by seq whatever order they finished in.
async def test_concurrent_steps_take_seq_in_call_order_and_replay_correctly(mode, open_engine, calls):
    delays = {"slow": 0.05, "mid": 0.02, "fast": 0.0}

    async def work(name):
        await anyio.sleep(delays[name])
        return name

    async def agent(ctx: Context) -> list:
        results = {}

        async def one(name):
            results[name] = await ctx.run(name, work, name)

        async with anyio.create_task_group() as tg:
            for name in ("slow", "mid", "fast"):
                tg.start_soon(one, name)
        await ctx.promise("more")
        return [results[n] for n in ("slow", "mid", "fast")]

    async with open_engine() as engine:
        first = await engine.run(agent, id="c")
        assert first.status == Status.SUSPENDED
        names = {seq: decode_entry(d).name for seq, d in engine.store.entries("c")[1:4]}
        if mode[0] == "asyncio":  # asyncio starts tasks in spawn order; trio shuffles them on purpose
            assert names == {1: "slow", 2: "mid", 3: "fast"}
        assert sorted(names.values()) == ["fast", "mid", "slow"]
        await engine.resolve("c", "more", True)
        done = await engine.resume("c")
    assert done.status == Status.COMPLETED and done.result == ["slow", "mid", "fast"]


async def test_replaying_concurrent_branches_in_any_order_never_diverges(open_engine):
    """Each branch runs several steps; replays schedule the branches differently every time."""

    async def agent(ctx: Context) -> list:
        out = {}

        async def branch(b):
            values = []
            for i in range(3):
                values.append(await ctx.run(f"b{b}-{i}", lambda b=b, i=i: b * 10 + i))
                await anyio.sleep(0.001 * ((b + i) % 3))
            out[b] = values

        async with anyio.create_task_group() as tg:
            for b in range(4):
                tg.start_soon(branch, b)
        await ctx.promise("next")
        return [out[b] for b in range(4)]

    async with open_engine() as engine:
        assert (await engine.run(agent, id="cc")).status == Status.SUSPENDED
        for _round in range(10):  # every resume replays all 12 steps, then suspends again
            out = await engine.resume("cc")
            assert out.status == Status.SUSPENDED, out.divergence
        await engine.resolve("cc", "next", 1)
        done = await engine.resume("cc")
    assert done.result == [[b * 10 + i for i in range(3)] for b in range(4)]


async def test_asyncio_gather_over_steps_works(mode, open_engine):
    if mode[0] != "asyncio":
        pytest.skip("asyncio.gather needs the asyncio backend")

    async def agent(ctx: Context) -> list:
        return list(await asyncio.gather(*(ctx.run(f"t{i}", lambda i=i: i * i) for i in range(5))))

    async with open_engine() as engine:
        assert (await engine.run(agent)).result == [0, 1, 4, 9, 16]


async def test_after_a_crash_that_committed_seq_2_but_not_seq_1_only_seq_1_reruns(open_engine, calls):
    from .crashing import Crash

    gate = {"crash": True}
    a_claimed, b_committed = anyio.Event(), anyio.Event()

    async def slow_then_crash():
        a_claimed.set()
        if gate["crash"]:
            await b_committed.wait()
            gate["crash"] = False
            raise Crash()  # dies after its sibling committed, before its own commit
        return "slow-result"

    async def agent(ctx: Context) -> list:
        out = {}

        async def a():
            out["a"] = await ctx.run("a", slow_then_crash)

        async def b():
            await a_claimed.wait()  # so "a" claims seq 1 on every backend
            out["b"] = await ctx.run("b", calls("b"))
            b_committed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(a)
            tg.start_soon(b)
        return [out["a"], out["b"]]

    # A lease short enough that the crashed run's lapses soon, long enough that a loop starved
    # by a loaded machine keeps it until the crash (at 50 ms it lapsed first: the run ended
    # with its lease lost, and nothing was raised).
    async with open_engine(lease_ttl=1.0) as engine:
        with pytest.raises(BaseException):  # noqa: B017 - the simulated crash, alone or in an exception group
            await engine.run(agent, id="gap")
        assert [s for s, _ in engine.store.entries("gap")] == [0, 2]
        await leases_lapsed(engine.store)
    async with open_engine() as engine:
        done = await engine.resume("gap")
    assert done.result == ["slow-result", "b:()"] and calls.counts == {"b": 1}


# 4. Durability modes.
@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_every_durability_mode_completes_and_replays(open_engine, durability, calls):
    async def agent(ctx: Context) -> list:
        a = await ctx.run("a", calls("a"))
        ok = await ctx.promise("p")
        return [a, ok]

    async with open_engine(durability=durability) as engine:
        assert (await engine.run(agent, id="d")).status == Status.SUSPENDED
        assert kinds(engine.store, "d") == ["started", "step"]
        await engine.resolve("d", "p", "yes")
        done = await engine.resume("d")
    assert done.result == ["a:()", "yes"] and calls.counts == {"a": 1}


async def test_exit_mode_writes_nothing_until_the_invocation_stops(open_engine):
    seen = []

    async def agent(ctx: Context, store_ref: str) -> int:
        await ctx.run("a", lambda: 1)
        await ctx.run("b", lambda: 2)
        seen.append(len(engine_ref[0].store.entries(ctx.invocation_id)))
        return 3

    engine_ref = []
    async with open_engine(durability="exit") as engine:
        engine_ref.append(engine)
        await engine.run(agent, "x", id="e")
        assert kinds(engine.store, "e") == ["started", "step", "step", "completed"]
    assert seen[0] == 1  # only entry 0 while it ran


# 6. Idempotent start.
async def test_starting_an_existing_id_attaches_or_conflicts(open_engine, calls):
    async def agent(ctx: Context, q: str) -> str:
        return await ctx.run("once", calls("once"), q)

    async with open_engine() as engine:
        first = await engine.run(agent, "q", id="same")
        again = await engine.run(agent, "q", id="same")
        assert again.result == first.result and calls.counts == {"once": 1}
        with pytest.raises(InvocationConflict, match="different input"):
            await engine.run(agent, "other", id="same")


# 7. Suspension: no lease held; resolving makes it runnable from any process.
async def test_suspended_invocation_holds_no_lease_and_resumes_when_resolved(open_engine, calls):
    async def agent(ctx: Context) -> str:
        plan = await ctx.run("plan", calls("plan"))
        approved = await ctx.promise("approval", type=bool)
        if not approved:
            raise TerminalError("rejected")
        return plan

    async with open_engine() as engine:
        out = await engine.run(agent, id="h")
        assert out.status == Status.SUSPENDED and out.waiting == "approval"
        assert engine.store.lease("h").owner == ""
        assert engine.runnable() == []
        record = await engine.resolve("h", "approval", True)
        assert record.status == Status.PENDING and engine.runnable() == ["h"]
        done = await engine.resume("h")
    assert done.result == "plan:()" and calls.counts == {"plan": 1}


async def test_a_rejected_promise_raises_promise_rejected(open_engine):
    async def agent(ctx: Context) -> str:
        try:
            await ctx.promise("approval")
        except PromiseRejected as exc:
            return f"stopped: {exc}"
        return "no"

    async with open_engine() as engine:
        await engine.run(agent, id="r")
        await engine.reject("r", "approval", "too expensive")
        done = await engine.resume("r")
    assert "too expensive" in done.result


async def test_a_promise_resolved_before_it_is_awaited_does_not_suspend(open_engine):
    async def agent(ctx: Context) -> int:
        await ctx.run("a", lambda: 1)
        return await ctx.promise("early")

    async with open_engine() as engine:
        await engine.start(agent, id="early")
        await engine.resolve("early", "early", 7, early=True)  # meant ahead of its asking
        assert (await engine.resume("early")).result == 7


# 8. Statuses.
async def test_failed_handler_ends_failed_with_its_error(open_engine):
    async def agent(ctx: Context) -> None:
        await ctx.run("a", lambda: 1)
        raise ValueError("bad state")

    async with open_engine() as engine:
        out = await engine.run(agent, id="f")
        assert out.status == Status.FAILED and out.error.type == "ValueError"
        assert "bad state" in out.error.message
        assert kinds(engine.store, "f")[-1] == "failed"
        assert engine.store.get("f").status == Status.FAILED


# 9. Cancellation.
async def test_cancel_reaches_a_suspended_handler_which_runs_compensation(open_engine, calls):
    async def agent(ctx: Context) -> str:
        await ctx.run("book", calls("book"))
        try:
            await ctx.promise("confirm")
        except Cancelled:
            await ctx.run("unbook", calls("unbook"))
            raise
        return "booked"

    async with open_engine() as engine:
        assert (await engine.run(agent, id="x")).status == Status.SUSPENDED
        out = await engine.cancel("x")
        assert out.status == Status.CANCELLED
        assert kinds(engine.store, "x") == ["started", "step", "cancel_received", "step", "cancelled"]
    assert calls.counts == {"book": 1, "unbook": 1}


@pytest.mark.parametrize("durability", ["exit", "async", "sync"])
async def test_a_cancelled_run_stops_a_handler_whose_steps_never_wait(open_engine, durability):
    # Quick `async def` steps whose commits wait for nothing (none in `exit`, an LMDB commit in
    # `async`, an fsync on the loop's own thread in `sync`): the handler never pauses by
    # itself, yet cancelling the run (as Ctrl-C in `journal run` does) stops it within about
    # a millisecond: `ctx.run` lets the loop turn once one has passed since the last turn.
    made = at_deadline = 0
    scope = anyio.CancelScope()

    async def quick() -> int:
        return 1

    async def agent(ctx: Context) -> int:
        nonlocal made, at_deadline
        while made < 200_000:  # (only a handler nothing can stop gets this far)
            await ctx.run("quick", quick)
            made += 1
            if made == 100:  # the run's time is up now (the timer fires at the loop's next turn)
                at_deadline = made
                scope.deadline = anyio.current_time()
        return made

    async with open_engine(durability=durability) as engine:
        with scope:
            await engine.run(agent, id="tight")
        assert scope.cancelled_caught and made < 200_000, made
        # A millisecond is 200 steps at most on the quickest store here (`exit`); a loaded
        # machine makes fewer. A turn that comes late lets thousands more through.
        assert made - at_deadline < 1_000, (at_deadline, made)
        assert engine.store.get("tight").status == Status.PENDING  # stopped, to be resumed


async def test_a_step_joining_a_gathering_commit_takes_no_turn_of_the_loop(tmp_path, monkeypatch):
    # `ctx.run` gives the loop a turn once a millisecond has passed since the last. A step of a
    # task that a gathering batch waits for must not take it then: it would miss the batch and
    # pay an fsync of its own.
    import time as clock

    from journal import LmdbStore
    from runtime import Engine

    monkeypatch.setattr(LmdbStore, "sync", lambda self: None)  # commits quick: only the steps' own time counts

    async def quick(x: int) -> int:
        return x

    async def slow(x: int) -> int:
        end = clock.perf_counter() + 0.002  # past the millisecond: the next ctx.run is due a turn
        while clock.perf_counter() < end:
            pass
        return x

    async def agent(ctx: Context) -> list:
        await ctx.run("first", quick, 0)  # takes the loop's turn: the next is a millisecond away
        return list(await ctx.gather(ctx.run("a", slow, 1), ctx.run("b", quick, 2)))

    async with Engine.open(str(tmp_path / "db")) as engine:
        await engine.run(agent, id="warm")
        before = engine.committer.batches
        done = await engine.run(agent, id="pair")
        assert done.result == [1, 2]
        # its creation, "first", the two steps of the gather together, its completion
        assert engine.committer.batches - before == 4, engine.committer.batches - before


async def test_cancel_of_a_running_invocation_arrives_at_its_next_context_call(open_engine, calls):
    started, request_seen = anyio.Event(), anyio.Event()

    async def agent(ctx: Context) -> str:
        await ctx.run("first", calls("first"))
        started.set()
        await request_seen.wait()  # busy outside the journal until the request reaches this process
        await ctx.run("second", calls("second"))
        return "finished"

    async with open_engine(poll_interval=0.02) as engine:
        read = engine.committer.read

        async def watched_read(fn, *args):
            # The lease watcher reads the records of the invocations it watches and hands a
            # request on before it next awaits; checked once the read is back on the event
            # loop (a blocking store reads on a thread).
            result = await read(fn, *args)
            if isinstance(result, list) and any(isinstance(r, InvocationRecord) and r.id == "cx"
                                                and r.cancel_requested for r in result):
                request_seen.set()
            return result

        engine.committer.read = watched_read
        async with anyio.create_task_group() as tg:
            results = []

            async def run():
                results.append(await engine.run(agent, id="cx"))

            tg.start_soon(run)
            await started.wait()
            await engine.cancel("cx", run=False)
        assert results[0].status == Status.CANCELLED
    assert calls.counts == {"first": 1}


async def test_a_child_named_by_its_registered_name_runs_with_that_handler(open_engine):
    async def double(ctx: Context, n: int) -> int:
        return await ctx.run("double", lambda: n * 2)

    async def parent(ctx: Context, n: int) -> int:
        return await ctx.call("double", n, id="kid") + 1

    async with open_engine(handlers={"double": double, "parent": parent}) as engine:
        outcome = await engine.run("parent", 20, id="p")
        assert outcome.status == Status.COMPLETED and outcome.result == 41
        assert engine.store.require("kid").handler == "double"
