"""Replay: recorded outcomes come back without running anything; changed code is caught."""

import anyio
import pytest

from journal import Status, decode_entry, kind_of
from runtime import Context, NondeterminismError

from ..waiting import leases_lapsed
from .crashing import Crash, crash_flag, crash_then_resume, program, step

pytestmark = pytest.mark.anyio


async def test_completed_steps_are_not_rerun_after_a_crash(open_engine, calls):
    crash = {"armed": True}

    def boom():
        if crash["armed"]:
            crash["armed"] = False
            raise Crash()
        return "late"

    async def agent(ctx: Context) -> list:
        a = await ctx.run("a", calls("a"))
        b = await ctx.run("b", calls("b"))
        c = await ctx.run("c", boom)
        return [a, b, c]

    outcome, _ = await crash_then_resume(open_engine, agent, agent)
    assert outcome.status == Status.COMPLETED
    assert outcome.result == ["a:()", "b:()", "late"]
    assert calls.counts == {"a": 1, "b": 1}


async def _diverge(open_engine, old, new):
    crash_flag["armed"] = True
    ran = []

    def watch(agent):
        async def wrapped(ctx: Context) -> list:
            ran.append("handler")
            return await agent(ctx)

        return wrapped

    outcome, entries = await crash_then_resume(open_engine, old, watch(new))
    return outcome, entries


@pytest.mark.parametrize(
    ("new_names", "new_args", "seq", "fragments"),
    [
        (("plan", "look"), None, 2, ["'search'", "'look'"]),  # renamed
        (("search", "plan"), None, 1, ["'plan'", "'search'"]),  # reordered
        (("plan", "search"), {"search": ("other",)}, 2, ["arguments"]),  # changed arguments
        (("plan", "extra", "search"), None, 2, ["'search'", "'extra'"]),  # extra step
        (("search",), None, 1, ["'plan'", "'search'"]),  # missing step
    ],
    ids=["renamed", "reordered", "changed-args", "extra-step", "missing-step"],
)
async def test_changed_code_is_a_nondeterminism_error_at_the_right_seq(open_engine, new_names, new_args, seq, fragments):
    old = program("plan", "search", args={"search": ("query",)})
    new = program(*new_names, args=new_args or {"search": ("query",)})
    outcome, entries = await _diverge(open_engine, old, new)
    assert outcome.status == Status.DIVERGED
    assert f"at seq {seq}" in outcome.divergence
    for fragment in fragments:
        assert fragment in outcome.divergence
    assert "journal fork inv --at" in outcome.divergence
    # Nothing was appended by the diverging run.
    assert [kind_of(decode_entry(d)) for _, d in entries] == ["started", "step", "step"]


async def test_returning_early_with_entries_left_is_a_divergence(open_engine):
    crash_flag["armed"] = True
    old = program("a", "b")

    async def new(ctx: Context) -> list:
        return [await ctx.run("a", step("a"))]

    outcome, _ = await crash_then_resume(open_engine, old, new)
    assert outcome.status == Status.DIVERGED
    assert "seq 2" in outcome.divergence and "handler returned" in outcome.divergence


async def test_a_diverged_invocation_is_parked_until_resumed_with_fixed_code(open_engine):
    crash_flag["armed"] = True
    old = program("plan", "search")
    outcome, _ = await crash_then_resume(open_engine, old, program("plan", "renamed"))
    assert outcome.status == Status.DIVERGED
    async with open_engine() as engine:
        assert engine.runnable() == []  # not retried in a loop
        from runtime._handler._handlers import _by_path

        _by_path[engine.store.get("inv").handler] = old
        fixed = await engine.resume("inv")
    assert fixed.status == Status.COMPLETED and fixed.result == ["plan", "search"]


async def test_nondeterminism_error_is_raised_before_any_side_effect(open_engine):
    crash_flag["armed"] = True
    effects = []
    old = program("plan", "search")

    async def new(ctx: Context) -> list:
        await ctx.run("plan", step("plan"))
        await ctx.run("charge-card", lambda: effects.append("charged"))
        return []

    outcome, _ = await crash_then_resume(open_engine, old, new)
    assert outcome.status == Status.DIVERGED and effects == []
    assert isinstance(NondeterminismError("x", invocation_id="i", seq=1), Exception)


async def test_a_clock_read_beside_an_unclaimed_entry_still_reports_divergence_before_side_effects(open_engine):
    crash_flag["armed"] = True
    effects = []
    old = program("plan", "search")  # journal: plan (seq 1), search (seq 2), then a crash

    async def new(ctx: Context) -> list:
        ctx.now()  # nothing like it was recorded after seq 0: runs live, tentatively
        await ctx.run("charge", lambda: effects.append("charged"))
        return []

    outcome, _ = await crash_then_resume(open_engine, old, new)
    assert outcome.status == Status.DIVERGED and "at seq 1" in outcome.divergence
    assert effects == []


async def test_gather_branches_making_identical_calls_each_replay_their_own_results(open_engine):
    """Sampling a model three times with the same prompt: each branch gets back its own answers."""
    import itertools

    counter = itertools.count()
    executions = []

    async def sample(prompt):
        n = next(counter)
        await anyio.sleep(0.001 * (n % 3))
        return f"answer-{n}"

    async def agent(ctx: Context) -> list:
        async def branch():
            first = await ctx.run("sample", sample, "same prompt")
            return [first, await ctx.run("sample", sample, "same prompt")]

        answers = await ctx.gather(branch(), branch(), branch())
        executions.append(answers)
        await ctx.promise("go")
        return answers

    async with open_engine() as engine:
        assert (await engine.run(agent, id="twins")).status == Status.SUSPENDED
        for _ in range(5):  # every resume replays all six steps; trio shuffles the branches each time
            out = await engine.resume("twins")
            assert out.status == Status.SUSPENDED, out.divergence
        await engine.resolve("twins", "go", 1)
        done = await engine.resume("twins")
    assert done.result == executions[0]
    assert all(e == executions[0] for e in executions)
    assert len({a for pair in done.result for a in pair}) == 6


async def test_concurrent_steps_keep_their_idempotency_keys_and_uuids_across_a_crash(open_engine):
    from runtime import current_step
    """Two customers charged in parallel; the process dies during the charges. On resume the
    branches may reach their charges in the other order: each must keep its own key."""

    keys: dict[str, list[str]] = {"alice": [], "bob": []}
    ids: dict[str, set] = {"alice": set(), "bob": set()}
    crash = {"armed": True}

    bob_charging = anyio.Event()

    async def lookup(who):
        if who == "alice":
            await bob_charging.wait()  # bob finishes first the first time
        return who

    async def charge(who):
        keys[who].append(current_step().idempotency_key)
        if crash["armed"]:
            if who == "bob":
                bob_charging.set()
                await anyio.sleep_forever()  # still charging when the process dies
            else:
                crash["armed"] = False
                raise Crash()
        return f"charged {who}"

    async def agent(ctx: Context) -> list:
        async def branch(who):
            await ctx.run(f"lookup-{who}", lookup, who)
            ids[who].add(ctx.uuid())
            return await ctx.run("charge", charge, who)

        return await ctx.gather(branch("alice"), branch("bob"))

    # 0.5 s, as in crash_then_resume: at 0.05 s a loaded machine let the lease lapse and the
    # run be taken over before its crash (PostgreSQL, "DID NOT RAISE").
    async with open_engine(lease_ttl=0.5) as engine:
        with pytest.raises(BaseException):  # noqa: B017 - the simulated crash, alone or in an exception group
            await engine.run(agent, id="pay")
        await leases_lapsed(engine.store)
    async with open_engine() as engine:
        done = await engine.resume("pay")
    assert done.result == ["charged alice", "charged bob"]
    for who in ("alice", "bob"):
        assert len(set(keys[who])) == 1, keys  # the rerun charge sent the same key as before
        assert len(ids[who]) == 1, ids
    assert keys["alice"][0] != keys["bob"][0]
