"""Child invocations (`ctx.call`, `ctx.send`): journaled ids and results, suspension, crashes, cancel."""

import pytest

from journal import Status, decode_entry
from runtime import Context, PromiseRejected, TerminalError

from .crashing import armed, crash_once, crash_then_resume, kinds

pytestmark = pytest.mark.anyio


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


async def test_a_crash_in_the_middle_of_a_child_call_resumes_without_rerunning_the_child(open_engine, calls):

    async def kid(ctx: Context, n: int) -> int:
        return await ctx.run("kid-work", calls("kid-work", result=n * 3))

    async def par(ctx: Context) -> int:
        value = await ctx.call(kid, 5, id="kid-c")
        await ctx.run("crash", crash_once)  # the process dies after the child finished
        return value

    armed["on"] = True
    outcome, _ = await crash_then_resume(open_engine, par, par)
    assert outcome.result == 15 and calls.counts == {"kid-work": 1}
