"""The handler API: steps, results, errors, retries, time, randomness and ids."""

import dataclasses
import datetime

import msgspec
import pytest

from journal import Status, check, decode_entry, kind_of
from runtime import Context, RetryPolicy, TerminalError, current_step

pytestmark = pytest.mark.anyio


class Answer(msgspec.Struct):
    text: str
    score: float


@dataclasses.dataclass
class Query:
    q: str
    limit: int = 3


def make_answer(text: str) -> Answer:
    return Answer(text, 0.5)


async def test_a_step_runs_once_and_its_result_is_journaled(open_engine, calls):
    async def agent(ctx: Context, q: str) -> str:
        return await ctx.run("echo", calls("echo"), q)

    async with open_engine() as engine:
        outcome = await engine.run(agent, "hi", id="a")
        assert outcome.status == Status.COMPLETED and outcome.result == "echo:('hi',)"
        kinds = [kind_of(decode_entry(d)) for _, d in engine.store.entries("a")]
    assert kinds == ["started", "step", "completed"]
    assert calls.counts == {"echo": 1}


async def test_sync_and_async_step_functions_both_work(open_engine):
    async def fetch(x):
        return x * 2

    async def agent(ctx: Context, x: int) -> list:
        return [await ctx.run("sync", lambda v: v + 1, x), await ctx.run("async", fetch, x)]

    async with open_engine() as engine:
        assert (await engine.run(agent, 5)).result == [6, 10]


async def test_step_results_are_typed_by_the_return_annotation_in_live_runs_too(open_engine):
    seen = []

    async def agent(ctx: Context, q: str) -> str:
        answer = await ctx.run("answer", make_answer, q)
        seen.append(answer)
        when = await ctx.run("when", lambda: "2026-01-02T03:04:05Z", type=datetime.datetime)
        seen.append(when)
        return answer.text

    async with open_engine() as engine:
        assert (await engine.run(agent, "x")).result == "x"
    assert seen[-2] == Answer("x", 0.5) and isinstance(seen[-2], Answer)
    assert seen[-1] == datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


async def test_an_unencodable_result_fails_the_step_naming_step_and_type(open_engine):
    async def agent(ctx: Context) -> str:
        await ctx.run("leaky", lambda: object())
        return "unreachable"

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="u")
        assert outcome.status == Status.FAILED
        assert "leaky" in outcome.error.message and "object" in outcome.error.message
        entries = [decode_entry(d) for _, d in engine.store.entries("u")]
        problems = check(engine.store)
    # The value is not journaled; the step's failure is, so replay raises it without running
    # the step again and the journal has no gap (`journal check` passes).
    assert [kind_of(e) for e in entries] == ["started", "step", "failed"]
    assert entries[1].error.type == "TerminalError" and "leaky" in entries[1].error.message
    assert problems == []


async def test_terminal_error_fails_the_step_without_retry_and_replays(open_engine, calls):
    attempts = []

    def refuse():
        attempts.append(1)
        raise TerminalError("card declined")

    async def agent(ctx: Context) -> str:
        try:
            await ctx.run("charge", refuse)
        except TerminalError as exc:
            return f"handled: {exc}"
        return "no"

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="t")
        assert outcome.result == "handled: card declined"
    assert len(attempts) == 1


async def test_ordinary_exceptions_are_retried_by_policy_then_fail(open_engine):
    attempts = []

    def flaky():
        attempts.append(current_step().attempt)
        if len(attempts) < 3:
            raise ConnectionError("try again")
        return "ok"

    def broken():
        raise ValueError("always")

    fast = RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0)

    async def agent(ctx: Context) -> str:
        first = await ctx.run("flaky", flaky, retry=fast)
        try:
            await ctx.run("broken", broken, retry=fast)
        except TerminalError as exc:
            return f"{first} / {exc.type_name}: {exc}"
        return "no"

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="r")
    assert attempts == [1, 2, 3]
    assert outcome.result.startswith("ok / ValueError: step 'broken' failed after 3 attempts")


async def test_non_retryable_exception_types_fail_at_once(open_engine):
    attempts = []

    def bad():
        attempts.append(1)
        raise KeyError("nope")

    async def agent(ctx: Context) -> str:
        await ctx.run("bad", bad, retry=RetryPolicy(max_attempts=5, non_retryable=(KeyError,)))
        return "no"

    async with open_engine() as engine:
        outcome = await engine.run(agent)
    assert outcome.status == Status.FAILED and len(attempts) == 1


def test_retry_backoff_grows_and_is_capped():
    policy = RetryPolicy(initial_interval=1, backoff=2, max_interval=5, jitter=0)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


async def test_idempotency_key_is_stable_across_retries(open_engine):
    keys = []

    def call():
        info = current_step()
        keys.append(info.idempotency_key)
        if info.attempt < 2:
            raise OSError("timeout")
        return info.seq

    async def agent(ctx: Context) -> int:
        return await ctx.run("pay", call, retry=RetryPolicy(initial_interval=0.001))

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="k")
    assert outcome.result == 1
    async with open_engine() as engine:
        from journal import Step
        from runtime import idempotency_key

        [step] = [e for e in (decode_entry(d) for _, d in engine.store.entries("k")) if isinstance(e, Step)]
    assert keys == [idempotency_key("k", step)] * 2 and keys[0].startswith("k:")


async def test_identical_calls_in_two_task_group_branches_get_distinct_idempotency_keys(open_engine):
    import anyio

    async def agent(ctx: Context) -> list:
        keys = []

        async def branch():
            keys.append(await ctx.run("charge", lambda: current_step().idempotency_key))

        async with anyio.create_task_group() as tg:
            tg.start_soon(branch)
            tg.start_soon(branch)
        return sorted(keys)

    async with open_engine() as engine:
        keys = (await engine.run(agent, id="twins")).result
    assert len(set(keys)) == 2


def test_current_step_outside_a_step_says_how_to_use_it():
    with pytest.raises(LookupError, match="ctx.run"):
        current_step()


async def test_now_random_and_uuid_are_the_same_on_replay(open_engine):
    seen = []

    async def agent(ctx: Context) -> None:
        t = ctx.now()
        r = ctx.random().random()
        u = ctx.uuid()
        seen.append((t, r, u))
        await ctx.promise("go")  # suspends: the second execution replays everything above

    async with open_engine() as engine:
        first = await engine.run(agent, id="n")
        assert first.status == Status.SUSPENDED
        await engine.resolve("n", "go", 1)
        assert (await engine.resume("n")).status == Status.COMPLETED
    assert len(seen) >= 2 and len(set(seen)) == 1
    assert seen[0][0].tzinfo is datetime.UTC


async def test_typed_input_is_decoded_and_invalid_input_is_refused_before_journaling(open_engine):
    async def agent(ctx: Context, query: Query) -> str:
        return f"{query.q}:{query.limit}"

    async with open_engine() as engine:
        assert (await engine.run(agent, {"q": "x"}, lax_input=True, id="ok")).result == "x:3"
        assert (await engine.run(agent, Query("y", 1))).result == "y:1"
        with pytest.raises(ValueError, match="does not fit"):
            await engine.run(agent, {"q": 5}, lax_input=True, id="bad")
        assert engine.store.get("bad") is None


async def test_step_name_must_be_a_string(open_engine):
    async def agent(ctx: Context) -> None:
        await ctx.run(lambda: 1, "oops")

    async with open_engine() as engine:
        outcome = await engine.run(agent)
    assert outcome.status == Status.FAILED and "step name" in outcome.error.message


async def test_a_retried_attempt_does_not_run_inside_the_previous_attempts_error(open_engine):
    import sys

    in_flight = []

    def flaky():
        in_flight.append(sys.exc_info()[1])  # the error being handled when the attempt starts
        if len(in_flight) < 3:
            raise ConnectionError(f"attempt {len(in_flight)}")
        return "ok"

    async def agent(ctx: Context) -> str:
        return await ctx.run("flaky", flaky, retry=RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0))

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="r")
    assert outcome.result == "ok"
    assert in_flight == [None, None, None]
