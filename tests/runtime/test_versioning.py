"""`ctx.patched`: old journals keep the old path, one answer per change id, across crashes."""

import anyio
import pytest

from runtime import Context

from .crashing import kinds

pytestmark = pytest.mark.anyio


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
        from runtime._handler._handlers import _by_path

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
        from runtime._handler._handlers import _by_path

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
