"""A user's program, written against the documented API only (docs/api.md, docs/testing.md).

`tests/typing/test_typing.py` type-checks it with `mypy --strict` and runs it: an annotation
that breaks what users write, or that promises a type the runtime does not deliver, fails
the suite. `assert_type` pins what each call returns."""

from __future__ import annotations

import datetime
import tempfile
import uuid
from typing import Any, assert_type

import anyio
import msgspec

from journal import InvocationRecord, Status, Store, open_store
from journal.errors import JournalError
from runtime import (
    Context,
    Engine,
    Message,
    NondeterminismError,
    Outcome,
    PromiseRejected,
    RetryPolicy,
    StepInfo,
    TerminalError,
    current_context,
    current_step,
)
from runtime.testing import DeterminismReport, check_determinism, replay_journal


class Weather(msgspec.Struct):
    city: str
    celsius: float


async def fetch(city: str) -> Weather:
    """A step function (async): imagine a weather API, streaming as it goes."""
    assert_type(current_step(), StepInfo)
    assert_type(current_step().emit(f"fetching {city}"), None)
    current_step().emit(b"raw bytes too")
    return Weather(city, 21.5)


def forecast(city: str, days: int = 3) -> list[Weather]:
    """A step function (sync) with a keyword argument."""
    return [Weather(city, 20.0 + day) for day in range(days)]


async def summarise(ctx: Context, text: str) -> str:
    return await ctx.run("summarise", str.upper, text)


async def agent(ctx: Context, city: str) -> str:
    assert_type(current_context(), Context)
    weather = await ctx.run("fetch", fetch, city)
    assert_type(weather, Weather)
    week = await ctx.run("forecast", forecast, city, days=7)
    assert_type(week, list[Weather])
    retried = await ctx.run("forecast-2", forecast, city, retry=RetryPolicy(max_attempts=5), timeout=10.0)
    assert_type(retried, list[Weather])
    raw = await ctx.run("raw", fetch, city, type=dict[str, Any])
    assert_type(raw, dict[str, Any])
    assert_type(ctx.now(), datetime.datetime)
    assert_type(ctx.uuid(), uuid.UUID)
    assert_type(ctx.random().uniform(0, 1), float)
    assert_type(ctx.invocation_id, str)
    assert_type(await ctx.tag("city", city), None)
    await ctx.sleep(0.01)
    approved = await ctx.promise("approval", type=bool)
    assert_type(approved, bool)
    note = await ctx.promise("note")
    assert_type(note, Any)
    visits = await ctx.state.get("visits", 0, type=int)
    assert_type(visits, int)
    history = await ctx.state.get("history", type=list[str])
    assert_type(history, list[str] | None)
    ctx.state.set("visits", visits + 1)
    summary = await ctx.call(summarise, f"{weather.city}: {len(week)} days")
    assert_type(summary, str)
    both = await ctx.gather(ctx.run("a", fetch, "Oslo"), ctx.run("b", fetch, "Rome"))
    assert_type(both, list[Weather])
    index, first = await ctx.select(ctx.run("c", fetch, "Lima"), ctx.run("d", fetch, "Pune"))
    assert_type(index, int)
    assert_type(first, Weather)
    if not approved:
        raise TerminalError("rejected")
    return f"{summary}, {weather.celsius} C, {raw['city']}, {note}, {len(both)} {first.city}"


async def main() -> str:
    """Run the agent to completion; return its result (the test checks it)."""
    with tempfile.TemporaryDirectory() as db:
        store: Store = open_store(db)
        try:
            async with Engine.open(store=store) as engine:
                started = await engine.start(agent, "Paris", id="w-1", key="thread-1")
                assert_type(started, InvocationRecord)
                await engine.resolve("w-1", "approval", True, early=True)
                await engine.resolve("w-1", "note", "bring an umbrella", early=True)
                outcome = await engine.run(agent, "Paris", id="w-1", key="thread-1")
                assert_type(outcome, Outcome[str])
                assert_type(outcome.status, Status)
                result = outcome.value()
                assert_type(result, str)
                assert outcome.status is Status.COMPLETED and isinstance(result, str)
                await replay_journal(agent, engine.store, "w-1")
        finally:
            store.close()
    return result


def errors_share_one_root(exc: PromiseRejected | NondeterminismError) -> JournalError:
    return exc


def check() -> DeterminismReport:
    return check_determinism(summarise, "text")


if __name__ == "__main__":
    print(anyio.run(main))


async def talking(ctx: Context) -> None:
    """Messages, replies and published values, as typed as the rest (checked, not run)."""
    message = await ctx.receive("orders", type=Weather, timeout=5.0)
    assert_type(message, Message[Weather])
    assert_type(message.value, Weather)
    assert_type(message.id, str)
    await message.reply({"ok": True})
    anything = await ctx.receive("notes")
    assert_type(anything.value, Any)
    await ctx.publish("progress", {"done": 1})
