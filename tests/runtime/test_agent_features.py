"""Threads with state, streaming, child invocations, versioning, continue-as-new, combinators."""

import anyio
import pytest

from journal import Status, decode_entry, decode_value, kind_of
from runtime import Context, PromiseRejected, StepTimeout, TerminalError
from runtime.errors import PromiseValueRefused

from ..waiting import until
from .test_replay import Crash

pytestmark = pytest.mark.anyio


def kinds(store, invocation_id):
    return [kind_of(decode_entry(d)) for _, d in store.entries(invocation_id)]


def append(messages, message):
    return [*(messages or []), message]


async def chat(ctx: Context, message: str) -> list:
    history = await ctx.state.get("history", default=[])
    reply = await ctx.run("reply", lambda: f"echo({message}) after {len(history)} turns")
    return ctx.state.update("history", [message, reply], reducer=append)


# -- threads with durable state -------------------------------------------------------------------

async def test_a_thread_remembers_earlier_turns(open_engine):
    async with open_engine() as engine:
        await engine.run(chat, "hi", key="thread-1")
        await engine.run(chat, "again", key="thread-1")
        third = await engine.run(chat, "third", key="thread-1")
        other = await engine.run(chat, "elsewhere", key="thread-2")
        state = engine.store.state("thread-1")
    assert [turn[0] for turn in third.result] == ["hi", "again", "third"]
    assert third.result[2][1] == "echo(third) after 2 turns"
    assert len(other.result) == 1
    assert [t[0] for t in decode_value(state["history"])] == ["hi", "again", "third"]


async def test_state_changes_commit_with_their_entry_and_replay_returns_the_same_reads(open_engine):
    seen = []

    async def agent(ctx: Context) -> int:
        count = await ctx.state.get("count", default=0)
        seen.append(count)
        ctx.state.set("count", count + 1)
        await ctx.promise("go")
        return await ctx.state.get("count")

    async with open_engine() as engine:
        assert (await engine.run(agent, key="k", id="a")).status == Status.SUSPENDED
        assert decode_value(engine.store.state("k")["count"]) == 1
        await engine.resolve("a", "go", True)
        done = await engine.resume("a")
        assert kinds(engine.store, "a") == ["started", "state_get", "state_set", "promise", "state_get", "completed"]
    assert done.result == 1 and set(seen) == {0}  # the replayed read saw 0 again, not the 1 it wrote


async def test_state_keys_clear_and_the_missing_key_error(open_engine):
    async def agent(ctx: Context) -> list:
        ctx.state.set("a", 1)
        ctx.state.set("b", 2)
        ctx.state.clear("a")
        return await ctx.state.keys()

    async def keyless(ctx: Context) -> None:
        await ctx.state.get("x")

    async with open_engine() as engine:
        assert (await engine.run(agent, key="k")).result == ["b"]
        assert list(engine.store.state("k")) == ["b"]
        out = await engine.run(keyless)
        assert out.status == Status.FAILED and "needs a key" in out.error.message


async def test_invocations_of_one_key_run_one_at_a_time_in_arrival_order(open_engine):
    async def waits(ctx: Context, n: int) -> int:
        await ctx.promise("go")
        ctx.state.update("order", n, reducer=append)
        return n

    async with open_engine() as engine:
        assert (await engine.run(waits, 1, key="q", id="first")).status == Status.SUSPENDED
        await engine.start(waits, 2, key="q", id="second")
        assert engine.store.key_queue("q") == ["first", "second"]
        with pytest.raises(Exception, match="queued behind 'first'"):
            await engine.resume("second")
        await engine.resolve("second", "go", True, early=True)  # queued: it has not asked yet
        await engine.resolve("first", "go", True)
        assert (await engine.resume("first")).result == 1
        assert engine.store.key_queue("q") == ["second"]
        assert (await engine.resume("second")).result == 2
        assert decode_value(engine.store.state("q")["order"]) == [1, 2]


async def test_a_changed_state_name_is_a_divergence(open_engine):
    async def old(ctx: Context) -> None:
        await ctx.state.get("history")
        await ctx.run("crash", _crash_once)

    async def new(ctx: Context) -> None:
        await ctx.state.get("messages")

    from .test_replay import _crash_then_resume

    _armed["on"] = True
    outcome, _ = await _crash_then_resume(open_engine, old, new, key="t")
    assert outcome.status == Status.DIVERGED and "'history'" in outcome.divergence and "'messages'" in outcome.divergence


_armed = {"on": False}


def _crash_once():
    if _armed["on"]:
        _armed["on"] = False
        raise Crash()


# -- streaming ---------------------------------------------------------------------------------

async def test_stream_delivers_each_event_once_in_order_across_a_replay(open_engine):
    async def agent(ctx: Context) -> str:
        for i in range(3):
            await ctx.emit({"chunk": i})
        await ctx.promise("more")
        await ctx.emit({"chunk": 3})
        return "done"

    async with open_engine() as engine:
        await engine.run(agent, id="s")
        received = []

        async def consume():
            async for event in engine.stream("s"):
                received.append((event.seq, event.value["chunk"]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await until(lambda: len(received) == 3, "the stream to deliver the events journaled so far")
            await engine.resolve("s", "more", True)
            await engine.resume("s")  # replays the first three emits: not delivered again
    assert [chunk for _, chunk in received] == [0, 1, 2, 3]
    assert [seq for seq, _ in received] == sorted(seq for seq, _ in received)


# -- child invocations --------------------------------------------------------------------------

async def child_double(ctx: Context, n: int) -> int:
    return await ctx.run("double", lambda: n * 2)


async def child_waits(ctx: Context, n: int) -> int:
    return n + await ctx.promise("extra", type=int)


async def child_fails(ctx: Context, n: int) -> int:
    raise TerminalError(f"cannot do {n}")


async def test_call_runs_a_child_invocation_and_journals_its_id_and_result(open_engine, calls):
    async def parent(ctx: Context) -> list:
        a = await ctx.call(child_double, 5)
        b = await ctx.call(child_double, 6, id="fixed-child")
        await ctx.run("after", calls("after"))
        return [a, b]

    async with open_engine() as engine:
        out = await engine.run(parent, id="p")
        assert out.result == [10, 12]
        assert kinds(engine.store, "p") == ["started", "called", "promise", "called", "promise", "step", "completed"]
        first_child = decode_entry(engine.store.entries("p")[1][1]).child
        assert engine.store.get(first_child).parent == "p"
        assert engine.store.get("fixed-child").status == Status.COMPLETED


async def test_a_suspended_child_suspends_its_parent_until_it_finishes(open_engine):
    async def parent(ctx: Context) -> int:
        return await ctx.call(child_waits, 1, id="kid")

    async with open_engine() as engine:
        out = await engine.run(parent, id="p")
        assert out.status == Status.SUSPENDED and out.waiting == "child:kid"
        await engine.resolve("kid", "extra", 41)
        assert (await engine.resume("kid")).result == 42
        assert engine.store.get("p").status == Status.PENDING  # the child's result woke it
        assert (await engine.resume("p")).result == 42


async def test_a_parent_waiting_on_a_child_points_at_the_childs_wait_and_its_promise_cannot_be_settled(open_engine):
    from runtime.errors import PromiseNotSettable

    async def grandparent(ctx: Context) -> int:
        return await ctx.call(parent_of_waiting_child, 1, id="mid")

    async with open_engine() as engine:
        out = await engine.run(grandparent, id="top")
        assert out.status == Status.SUSPENDED and out.waiting == "child:mid"
        waiting = engine.waiting_for("top")  # through the child to the grandchild that really waits
        assert (waiting.id, waiting.waiting) == ("mid.kid", "extra")
        for settle in (engine.resolve("top", "child:mid", 5), engine.reject("top", "child:mid", "no")):
            with pytest.raises(PromiseNotSettable, match=r"journal resolve mid.kid extra JSON"):
                await settle
        assert engine.store.get("top").status == Status.SUSPENDED
        assert engine.store.resolution("top", "child:mid") is None
        await engine.resolve("mid.kid", "extra", 41)
        assert (await engine.resume("top")).result == 42  # runs the grandchild, the child, then itself
        assert engine.store.get("mid.kid").status == engine.store.get("mid").status == Status.COMPLETED


async def parent_of_waiting_child(ctx: Context, n: int) -> int:
    return await ctx.call(child_waits, n, id=f"{ctx.invocation_id}.kid")


_child_runs: list[int] = []


class _ProcessDied(BaseException):
    """Stands in for the process dying while the child's step runs."""


def _child_effect(n: int) -> int:
    _child_runs.append(n)
    if len(_child_runs) == 1:
        raise _ProcessDied()
    return n * 2


async def child_approves_then_works(ctx: Context, n: int) -> int:
    await ctx.promise("approval")
    return await ctx.run("work", _child_effect, n)


async def parent_of_working_child(ctx: Context, n: int) -> int:
    return await ctx.call(child_approves_then_works, n, id=f"{ctx.invocation_id}.kid") + 1


async def test_a_crash_in_the_middle_of_a_child_run_by_its_resumed_parent_resumes_both(open_engine):
    from journal import Renew

    _child_runs.clear()
    async with open_engine() as engine:
        assert (await engine.run(parent_of_working_child, 20, id="cp")).waiting == "child:cp.kid"
        await engine.resolve("cp.kid", "approval", True)
        died = None
        try:
            await engine.resume("cp")  # runs the child, which dies in its step
        except BaseException as exc:  # noqa: BLE001 - the stand-in crash, maybe inside a task group's group
            died = exc
        while isinstance(died, BaseExceptionGroup):
            died = died.exceptions[0]
        assert isinstance(died, _ProcessDied)
    async with open_engine() as engine:
        for invocation_id in ("cp", "cp.kid"):  # the dead process's leases lapse
            lease = engine.store.lease(invocation_id)
            engine.store.apply_one(Renew(invocation_id, lease.epoch, 0, 0))
        outcome = await engine.resume("cp")
        assert outcome.status == Status.COMPLETED and outcome.result == 41
        assert _child_runs == [20, 20]  # the step caught in flight runs once more, and only it
        assert engine.store.get("cp.kid").status == Status.COMPLETED


async def test_a_failed_child_raises_in_the_parent(open_engine):
    async def parent(ctx: Context) -> str:
        try:
            await ctx.call(child_fails, 3)
        except PromiseRejected as exc:
            return str(exc)
        return "no"

    async with open_engine() as engine:
        assert "cannot do 3" in (await engine.run(parent)).result


async def test_send_starts_a_child_without_waiting(open_engine):
    async def parent(ctx: Context) -> str:
        return await ctx.send(child_double, 4, id="sent")

    async with open_engine() as engine:
        assert (await engine.run(parent)).result == "sent"
        assert engine.store.get("sent").status == Status.PENDING
        await engine.recover()
        assert (await engine.get("sent")).result == 8


async def test_cancelling_a_parent_cancels_the_child_it_awaits(open_engine):
    async def parent(ctx: Context) -> int:
        return await ctx.call(child_waits, 1, id="kid2")

    async with open_engine() as engine:
        await engine.run(parent, id="p2")
        out = await engine.cancel("p2")
        assert out.status == Status.CANCELLED
        assert engine.store.get("kid2").status == Status.CANCELLED


# -- versioning ---------------------------------------------------------------------------------

async def test_patched_keeps_old_journals_on_the_old_path(open_engine):
    async def v1(ctx: Context) -> str:
        a = await ctx.run("a", lambda: "a")
        c = await ctx.run("c", lambda: "c")
        await ctx.promise("go")
        return a + c

    async def v2(ctx: Context) -> str:
        a = await ctx.run("a", lambda: "a")
        if ctx.patched("add-b"):
            a += await ctx.run("b", lambda: "b")
        c = await ctx.run("c", lambda: "c")
        await ctx.promise("go")
        return a + c

    async with open_engine() as engine:
        await engine.run(v1, id="old")
        from runtime._handlers import _by_path

        _by_path[engine.store.get("old").handler] = v2
        await engine.resolve("old", "go", 1)
        assert (await engine.resume("old")).result == "ac"  # recorded before the change
        assert "patched" not in kinds(engine.store, "old")
        await engine.run(v2, id="new")
        await engine.resolve("new", "go", 1)
        assert (await engine.resume("new")).result == "abc"
        assert kinds(engine.store, "new")[:4] == ["started", "step", "patched", "step"]


async def test_patched_gives_one_answer_per_change_id_for_the_whole_invocation(open_engine):
    # Recorded under v1; v2 asks before its first step (replaying) and again after the promise
    # (by then live): the invocation took the old path, so both answers are False.
    async def v1(ctx: Context) -> list:
        await ctx.run("a", lambda: "a")
        await ctx.promise("go")
        return []

    async def v2(ctx: Context) -> list:
        answers = [ctx.patched("x")]
        await ctx.run("a", lambda: "a")
        await ctx.promise("go")
        answers.append(ctx.patched("x"))
        if ctx.patched("x"):
            await ctx.run("new-path", lambda: "n")
        return answers

    async with open_engine() as engine:
        await engine.run(v1, id="v1-run")
        from runtime._handlers import _by_path

        _by_path[engine.store.get("v1-run").handler] = v2
        await engine.resolve("v1-run", "go", 1)
        assert (await engine.resume("v1-run")).result == [False, False]
        assert "patched" not in kinds(engine.store, "v1-run") and "step" in kinds(engine.store, "v1-run")
        # A new invocation takes the new path, journals the patch once, and replays it the same way.
        await engine.run(v2, id="v2-run")
        await engine.resolve("v2-run", "go", 1)
        assert (await engine.resume("v2-run")).result == [True, True]
        assert kinds(engine.store, "v2-run").count("patched") == 1


async def test_patched_answers_survive_a_crash_between_the_two_questions():
    from runtime.testing import check_determinism

    async def asks_twice(ctx: Context) -> list:
        answers = [ctx.patched("x")]
        await ctx.run("a", lambda: "a")
        await ctx.promise("go")
        answers.append(ctx.patched("x"))
        return answers

    report = await anyio.to_thread.run_sync(lambda: check_determinism(asks_twice, promises={"go": 1}))
    assert report.result == [True, True] and report.crash_points > 0


# -- continue-as-new ------------------------------------------------------------------------------

async def loop_agent(ctx: Context, state: dict) -> dict:
    n = await ctx.run("work", lambda: state["n"] + 1)
    if n < state["until"]:
        ctx.continue_as_new({"n": n, "until": state["until"]})
    return {"n": n}


async def test_continue_as_new_starts_a_fresh_linked_journal(open_engine):
    async with open_engine() as engine:
        out = await engine.run(loop_agent, {"n": 0, "until": 3}, id="loop", key="loop-key")
        assert out.result == {"n": 3} and out.id == "loop~2"
        first, second = engine.store.get("loop"), engine.store.get("loop~1")
        assert first.continued_as == "loop~1" and second.continued_from == "loop"
        assert kinds(engine.store, "loop") == ["started", "step", "continued_as_new"]
        assert kinds(engine.store, "loop~2") == ["started", "step", "completed"]
        assert engine.store.get("loop~2").key == "loop-key"
        assert engine.store.key_queue("loop-key") == []
        # Attaching to the first id follows the chain to the final result.
        assert (await engine.run(loop_agent, {"n": 0, "until": 3}, id="loop", key="loop-key")).result == {"n": 3}


# -- combinators and timeouts ---------------------------------------------------------------------

async def test_gather_returns_results_in_argument_order(open_engine):
    async def slow(x):
        await anyio.sleep(0.01 * (3 - x))
        return x

    async def agent(ctx: Context) -> list:
        return await ctx.gather(*(ctx.run(f"s{i}", slow, i) for i in range(3)))

    async with open_engine() as engine:
        assert (await engine.run(agent)).result == [0, 1, 2]


async def test_select_journals_the_winner_and_replay_picks_the_same(open_engine, calls):
    async def fast():
        return "fast"

    async def slow():
        await anyio.sleep_forever()  # loses the race whatever the load: select cancels it

    async def agent(ctx: Context) -> list:
        index, value = await ctx.select(ctx.run("slow", slow), ctx.run("fast", fast))
        await ctx.promise("go")
        return [index, value]

    async with open_engine() as engine:
        await engine.run(agent, id="sel")
        assert "selected" in kinds(engine.store, "sel")
        await engine.resolve("sel", "go", 1)
        assert (await engine.resume("sel")).result == [1, "fast"]


async def test_promise_timeout_raises_step_timeout_and_replays_it(open_engine):
    async def agent(ctx: Context) -> str:
        try:
            await ctx.promise("answer", timeout=0.05)
        except StepTimeout:
            return "gave up"
        return "answered"

    async with open_engine() as engine:
        assert (await engine.run(agent, id="to")).result == "gave up"
        entries = [decode_entry(d) for _, d in engine.store.entries("to")]
        assert entries[2].timed_out


async def test_a_long_promise_timeout_suspends_and_wakes_on_the_timer(open_engine):
    async def agent(ctx: Context) -> str:
        try:
            return await ctx.promise("answer", timeout=0.3)
        except StepTimeout:
            return "timed out"

    async with open_engine(inline_sleep_limit=0.05) as engine:
        out = await engine.run(agent, id="lt")
        assert out.status == Status.SUSPENDED and out.waiting == "answer" and out.wake_at is not None
        await until(lambda: engine.runnable() == ["lt"], "the timeout's timer to fall due")
        assert (await engine.resume("lt")).result == "timed out"


async def test_select_over_a_promise_and_a_short_timer_lets_the_timer_win(open_engine):
    async def agent(ctx: Context) -> list:
        return list(await ctx.select(ctx.promise("answer"), ctx.sleep(0.1)))

    async with open_engine() as engine:
        out = await engine.run(agent, id="race")
    assert out.result == [1, None]


async def test_a_timeout_error_raised_by_the_step_itself_is_an_ordinary_failure(open_engine):
    from runtime import RetryPolicy

    attempts = []

    def flaky_socket():
        attempts.append(1)
        if len(attempts) == 1:
            raise TimeoutError("read timed out")
        return "ok"

    async def agent(ctx: Context) -> str:
        return await ctx.run("fetch", flaky_socket, retry=RetryPolicy(initial_interval=0.001))

    async with open_engine() as engine:
        assert (await engine.run(agent)).result == "ok"
    assert len(attempts) == 2


async def test_a_promise_value_of_the_wrong_type_names_the_promise(open_engine):
    async def agent(ctx: Context) -> int:
        return await ctx.promise("count", type=int)

    async with open_engine() as engine:
        await engine.run(agent, id="wt")
        # Refused when resolved: the run stays suspended on it.
        with pytest.raises(PromiseValueRefused, match="promise 'count' of invocation 'wt' expects int"):
            await engine.resolve("wt", "count", "three")
        assert engine.store.get("wt").status == Status.SUSPENDED
        await engine.resolve("wt", "count", 3)
        out = await engine.resume("wt")
    assert out.status == Status.COMPLETED and out.result == 3


async def test_results_are_typed_by_the_return_annotation_when_read_back(open_engine):
    import msgspec

    class Report(msgspec.Struct):
        text: str

    async def agent(ctx: Context) -> Report:
        return Report(await ctx.run("t", lambda: "x"))

    async with open_engine() as engine:
        live = await engine.run(agent, id="typed")
        later = await engine.get("typed")
    assert live.result == later.result == Report("x")


async def test_a_replayed_state_read_returns_the_value_not_its_bytes(open_engine):
    from .test_replay import _crash_then_resume

    seen = []

    async def writer(ctx: Context) -> None:
        ctx.state.set("history", ["hi"])
        await ctx.run("noop", lambda: None)

    async def reader(ctx: Context) -> list:
        history = await ctx.state.get("history", default=[])
        seen.append(history)
        await ctx.run("crash", _crash_once)
        return history

    async with open_engine() as engine:
        await engine.run(writer, key="t")
    _armed["on"] = True
    outcome, _ = await _crash_then_resume(open_engine, reader, reader, key="t")
    assert outcome.result == ["hi"]
    assert len(seen) >= 2 and all(s == ["hi"] for s in seen)  # the live read and the replayed one


async def test_run_of_an_invocation_queued_behind_a_suspended_one_returns_pending(open_engine):
    async def waits(ctx: Context, n: int) -> int:
        await ctx.promise("go")
        return n

    async with open_engine() as engine:
        await engine.run(waits, 1, key="q", id="first")
        with anyio.fail_after(60):  # a hang guard
            out = await engine.run(waits, 2, key="q", id="second")
    assert out.status == Status.PENDING and out.waiting == "turn:first"


async def test_continue_as_new_with_a_typed_result(open_engine):
    async def countdown(ctx: Context, n: int) -> str:
        await ctx.run("tick", lambda: n)
        if n > 0:
            ctx.continue_as_new(n - 1)
        return "liftoff"

    async with open_engine() as engine:
        out = await engine.run(countdown, 2, id="cd")
    assert out.result == "liftoff" and out.id == "cd~2"


async def test_compensation_that_waits_for_a_promise_suspends_then_ends_cancelled(open_engine, calls):
    from runtime import Cancelled

    async def agent(ctx: Context) -> str:
        await ctx.run("book", calls("book"))
        try:
            await ctx.promise("confirm")
        except Cancelled:
            if await ctx.promise("refund-approved"):  # a person signs off the compensation
                await ctx.run("refund", calls("refund"))
            raise
        return "booked"

    async with open_engine() as engine:
        await engine.run(agent, id="comp")
        waiting = await engine.cancel("comp")
        assert waiting.status == Status.SUSPENDED and waiting.waiting == "refund-approved"
        assert not engine.store.get("comp").cancel_requested  # delivered: the request is consumed
        await engine.resolve("comp", "refund-approved", True)
        done = await engine.resume("comp")
    assert done.status == Status.CANCELLED
    assert calls.counts == {"book": 1, "refund": 1}


async def test_two_runs_of_one_invocation_in_one_process_run_each_step_once(open_engine, calls):
    async def slow_pay(ctx: Context) -> str:
        await anyio.sleep(0.05)
        return await ctx.run("pay", calls("pay"))

    async with open_engine() as engine:
        results = []

        async def attach():
            results.append(await engine.run(slow_pay, id="order-7"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(attach)
            tg.start_soon(attach)
    assert [r.status for r in results] == [Status.COMPLETED, Status.COMPLETED]
    assert calls.counts == {"pay": 1}


async def test_trim_keeps_a_finished_child_its_unfinished_parent_links_to(open_engine):
    from journal import trim

    async def parent(ctx: Context) -> int:
        n = await ctx.call(child_double, 3, id="kid-t")
        await ctx.promise("go")
        return n

    async with open_engine() as engine:
        await engine.run(parent, id="par")
        assert [r.id for r in trim(engine.store, now_us=2**62)] == []
        engine.store.delete(["kid-t"])  # even if it goes (trimmed by hand), the parent resumes
        await engine.resolve("par", "go", 1)
        assert (await engine.resume("par")).result == 6


async def test_cancelling_a_diverged_invocation_abandons_it(open_engine):
    from .test_replay import _crash_flag, _crash_then_resume, _program

    _crash_flag["armed"] = True
    outcome, _ = await _crash_then_resume(open_engine, _program("plan", "search"), _program("plan", "renamed"))
    assert outcome.status == Status.DIVERGED
    async with open_engine() as engine:
        from runtime._handlers import _by_path

        _by_path[engine.store.get("inv").handler] = _program("plan", "renamed")
        out = await engine.cancel("inv")
        assert out.status == Status.CANCELLED
        assert kinds(engine.store, "inv")[-1] == "cancelled"


async def test_a_changed_return_type_on_replay_is_a_divergence_naming_the_step(open_engine):
    from .test_replay import _crash_then_resume

    def word() -> str:
        return "seven"

    def number() -> int:
        return 7

    async def old(ctx: Context) -> None:
        await ctx.run("value", word)
        await ctx.run("crash", _crash_once)

    async def new(ctx: Context) -> None:
        await ctx.run("value", number)

    _armed["on"] = True
    outcome, _ = await _crash_then_resume(open_engine, old, new)
    assert outcome.status == Status.DIVERGED and "'value'" in outcome.divergence and "int" in outcome.divergence


async def test_exit_durability_keeps_finished_steps_when_interrupted(open_engine, calls):
    import functools

    started = anyio.Event()

    async def agent(ctx: Context) -> str:
        await ctx.run("llm", calls("llm"))
        started.set()
        await ctx.run("slow", anyio.sleep, 5)
        return "done"

    async with open_engine(durability="exit") as engine:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(engine.run, agent, id="ex"))
            await started.wait()
            tg.cancel_scope.cancel()
        assert kinds(engine.store, "ex") == ["started", "step"]
    assert calls.counts == {"llm": 1}


async def test_select_over_two_promises_wakes_on_either(open_engine):
    async def agent(ctx: Context) -> list:
        return list(await ctx.select(ctx.promise("a"), ctx.promise("b")))

    async with open_engine() as engine:
        out = await engine.run(agent, id="two")
        assert out.status == Status.SUSPENDED
        record = await engine.resolve("two", "b", "bee")
        assert record.status == Status.PENDING  # "b" woke it, though "a" is the first name
        assert (await engine.resume("two")).result == [1, "bee"]


async def test_select_over_a_promise_and_a_long_timer_wakes_on_the_promise(open_engine):
    async def agent(ctx: Context) -> list:
        return list(await ctx.select(ctx.promise("answer"), ctx.sleep(3600)))

    async with open_engine(inline_sleep_limit=0.05) as engine:
        out = await engine.run(agent, id="pt")
        assert out.status == Status.SUSPENDED and out.waiting == "answer" and out.wake_at is not None
        await engine.resolve("pt", "answer", 42)
        assert (await engine.resume("pt")).result == [0, 42]


async def test_a_keyed_diverged_invocation_is_forked_and_the_fork_runs_once_the_source_is_cancelled(open_engine):
    from journal import fork

    from .test_replay import _crash_flag, _crash_then_resume, _program

    _crash_flag["armed"] = True
    outcome, _ = await _crash_then_resume(open_engine, _program("plan", "search"), _program("plan", "renamed"),
                                          key="thread")
    assert outcome.status == Status.DIVERGED
    async with open_engine() as engine:
        from runtime._handlers import _by_path

        _by_path[engine.store.get("inv").handler] = _program("plan", "renamed")
        forked = fork(engine.store, "inv", at=2, new_id="inv-fixed")
        assert forked.status == Status.PENDING
        assert engine.store.key_queue("thread") == ["inv", "inv-fixed"]
        assert (await engine.cancel("inv")).status == Status.CANCELLED  # abandon the diverged one
        done = await engine.resume("inv-fixed")
    assert done.status == Status.COMPLETED and done.result == ["plan", "renamed"]


async def test_a_crash_in_the_middle_of_a_child_call_resumes_without_rerunning_the_child(open_engine, calls):
    from .test_replay import _crash_then_resume

    async def kid(ctx: Context, n: int) -> int:
        return await ctx.run("kid-work", calls("kid-work", result=n * 3))

    async def par(ctx: Context) -> int:
        value = await ctx.call(kid, 5, id="kid-c")
        await ctx.run("crash", _crash_once)  # the process dies after the child finished
        return value

    _armed["on"] = True
    outcome, _ = await _crash_then_resume(open_engine, par, par)
    assert outcome.result == 15 and calls.counts == {"kid-work": 1}


async def test_a_crash_in_the_middle_of_a_continue_as_new_chain_resumes_the_chain(open_engine, calls):
    from .test_replay import _crash_then_resume

    async def chain(ctx: Context, n: int) -> int:
        await ctx.run(f"tick-{n}", calls(f"tick-{n}", result=n))
        if n == 1:
            await ctx.run("crash", _crash_once)
        if n < 2:
            ctx.continue_as_new(n + 1)
        return n

    _armed["on"] = True
    outcome, _ = await _crash_then_resume(open_engine, chain, chain, input=0)
    assert outcome.result == 2 and outcome.id == "inv~2"
    assert calls.counts == {"tick-0": 1, "tick-1": 1, "tick-2": 1}


async def test_a_crash_after_a_select_was_won_replays_the_same_winner(open_engine, calls):
    from .test_replay import _crash_then_resume

    async def quick():
        return "quick"

    async def leisurely():
        await anyio.sleep_forever()  # loses the race whatever the load: select cancels it

    async def racer(ctx: Context) -> list:
        won = list(await ctx.select(ctx.run("leisurely", leisurely), ctx.run("quick", quick)))
        await ctx.run("crash", _crash_once)
        return won

    _armed["on"] = True
    outcome, entries = await _crash_then_resume(open_engine, racer, racer)
    assert outcome.result == [1, "quick"]
