"""The determinism guard: handler code that reads the clock or an unseeded random source
outside ctx.run raises, naming the ctx equivalent; nothing else is affected."""

from __future__ import annotations

import datetime
import logging
import os
import random
import time
import uuid
from datetime import date
from datetime import datetime as DateTime

import anyio
import pytest

from journal import LmdbStore, MemoryStore, Status
from runtime import Context, Engine, NondeterminismError
from runtime.testing import DeterminismViolation, determinism_guard

pytestmark = pytest.mark.anyio

CALLS = {
    "time.time": (lambda: time.time(), "ctx.now()"),
    "time.time_ns": (lambda: time.time_ns(), "ctx.now()"),
    "datetime.now": (lambda: datetime.datetime.now(), "ctx.now()"),
    "datetime.now, imported class": (lambda: DateTime.now(datetime.UTC), "ctx.now()"),
    "datetime.utcnow": (lambda: DateTime.utcnow(), "ctx.now()"),
    "datetime.today": (lambda: DateTime.today(), "ctx.now().date()"),
    "date.today": (lambda: date.today(), "ctx.now().date()"),
    "random.random": (lambda: random.random(), "ctx.random().random(...)"),
    "random.choice": (lambda: random.choice("abc"), "ctx.random().choice(...)"),
    "random.randint": (lambda: random.randint(1, 6), "ctx.random().randint(...)"),
    "random.shuffle": (lambda: random.shuffle([1, 2]), "ctx.random().shuffle(...)"),
    "uuid.uuid4": (lambda: uuid.uuid4(), "ctx.uuid()"),
    "os.urandom": (lambda: os.urandom(4), "ctx.random().randbytes(n)"),
}


def handler_calling(call):
    async def agent(ctx: Context) -> str:
        await ctx.run("before", lambda: "ok")
        call()
        return "returned"

    return agent


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("name", sorted(CALLS))
async def test_each_source_of_nondeterminism_in_handler_code_is_stopped_naming_the_ctx_call(name):
    call, instead = CALLS[name]
    engine = Engine(MemoryStore())
    with determinism_guard():
        outcome = await engine.run(handler_calling(call), id="g")
    assert outcome.status == Status.DIVERGED  # parked: fix the code, then resume
    assert "called by handler code of invocation 'g' outside ctx.run" in outcome.divergence
    assert f"Use {instead}" in outcome.divergence
    assert "test_guard.py" in outcome.divergence  # where the call was made


async def test_the_violation_is_a_nondeterminism_error_naming_the_call_and_invocation():
    def read_clock():
        with pytest.raises(DeterminismViolation) as raised:
            time.time()
        return raised.value

    errors = []

    async def agent(ctx: Context) -> str:
        errors.append(read_clock())
        return "done"

    with determinism_guard():
        assert (await Engine(MemoryStore()).run(agent, id="v")).status == Status.COMPLETED
    (error,) = errors
    assert isinstance(error, NondeterminismError)
    assert error.call == "time.time()" and error.invocation_id == "v" and error.seq is None


async def test_step_functions_and_code_outside_handlers_are_not_affected():
    def step() -> list:
        return [time.time(), DateTime.now().year, random.random(), str(uuid.uuid4()), os.urandom(2).hex(), date.today().year]

    async def agent(ctx: Context) -> list:
        return await ctx.run("reads everything", step)

    with determinism_guard():
        time.time(), random.random(), DateTime.now()  # test code, not handler code
        outcome = await Engine(MemoryStore()).run(agent)
    assert outcome.status == Status.COMPLETED and len(outcome.result) == 6


async def test_the_engine_anyio_and_logging_read_the_clock_freely_while_a_handler_runs(caplog):
    log = logging.getLogger("agent")

    async def agent(ctx: Context) -> str:
        log.warning("starting")  # logging stamps the record with time.time()
        await anyio.sleep(0.001)
        await ctx.sleep(0.001)
        ctx.now(), ctx.uuid(), ctx.random().random()
        await ctx.run("step", lambda: "ok")
        return "done"

    with determinism_guard():
        outcome = await Engine(MemoryStore()).run(agent)
    assert outcome.status == Status.COMPLETED
    assert "starting" in caplog.text


async def test_without_the_guard_nothing_is_checked():
    outcome = await Engine(MemoryStore()).run(handler_calling(time.time))
    assert outcome.status == Status.COMPLETED


async def test_concurrent_invocations_do_not_see_each_others_guard():
    engine = Engine(MemoryStore())
    outcomes = {}

    async def agent(ctx: Context) -> float:
        await ctx.run("step", lambda: 1)
        await anyio.sleep(0.01)  # interleave with the other invocation
        return time.time()

    async def guarded():
        with determinism_guard():
            outcomes["guarded"] = await engine.run(agent, id="guarded")

    async def unguarded():
        outcomes["unguarded"] = await engine.run(agent, id="unguarded")

    async with anyio.create_task_group() as tg:
        tg.start_soon(guarded)
        tg.start_soon(unguarded)
    assert outcomes["guarded"].status == Status.DIVERGED
    assert outcomes["unguarded"].status == Status.COMPLETED


async def test_the_guard_can_be_switched_off_for_a_nested_block():
    with determinism_guard():
        with determinism_guard(enabled=False):
            outcome = await Engine(MemoryStore()).run(handler_calling(random.random))
    assert outcome.status == Status.COMPLETED


async def test_handler_code_sent_to_a_worker_thread_is_still_handler_code():
    async def agent(ctx: Context) -> float:
        return await anyio.to_thread.run_sync(lambda: time.time())  # outside ctx.run: not journaled

    with determinism_guard():
        outcome = await Engine(MemoryStore()).run(agent)
    assert outcome.status == Status.DIVERGED and "time.time()" in outcome.divergence


# -- the pytest plugin's fixtures ------------------------------------------------------------


async def test_the_engine_fixture_runs_handlers_with_the_guard_on(engine, journal_store):
    assert isinstance(journal_store, LmdbStore) and engine.store is journal_store
    good = await engine.run(handler_calling(lambda: None))
    bad = await engine.run(handler_calling(uuid.uuid4))
    assert good.status == Status.COMPLETED
    assert bad.status == Status.DIVERGED and "ctx.uuid()" in bad.divergence


@pytest.fixture
def journal_engine_options():
    return {"durability": "async", "inline_sleep_limit": 0}


async def test_the_engine_fixture_takes_options_from_journal_engine_options(engine):
    assert str(engine.durability) == "async" and engine.inline_sleep_limit == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_an_invocation_run_from_inside_a_step_is_guarded_handler_code_again():
    from runtime import current_step

    seen = {}

    async def inner(ctx: Context) -> str:
        try:
            seen["step"] = current_step().name
        except LookupError:
            seen["step"] = None  # handler code: no step is running here
        time.time()  # handler code of `inner`, although its caller is a step of `outer`
        return "returned"

    async def outer(ctx: Context) -> list:
        async def run_inner() -> list:
            out = await Engine(MemoryStore()).run(inner, id="inner")
            return [out.status.value, out.divergence is not None and "outside ctx.run" in out.divergence]

        return await ctx.run("sub", run_inner)

    with determinism_guard():
        outcome = await Engine(MemoryStore()).run(outer, id="outer")
    assert outcome.result == ["diverged", True]
    assert seen == {"step": None}
