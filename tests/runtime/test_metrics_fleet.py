"""The Prometheus gauges of limits, budgets and schedules (DESIGN.md, "Operating a fleet"),
parsed with prometheus_client's parser after a known workload, on LMDB and PostgreSQL:
units held and waited for, tokens steps reported, what a budget's scope used, and how late a
schedule's tick is."""

from __future__ import annotations

import datetime
import functools
import os
import time

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from journal import HOST, MemoryStore
from journal.limits import LimitRule, Request
from runtime import Context, Engine, current_step
from runtime._flow._schedules import tick_id
from runtime.metrics import MAX_LIMIT_LABELS, Metrics

from ..conftest import store_target

pytestmark = pytest.mark.anyio

STORES = [pytest.param("lmdb", id="lmdb"), pytest.param("postgres", id="postgres")]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _scrape(metrics: Metrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of the exposition: family sample name -> sorted labels -> value."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _by(samples: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for labels, value in samples.get(name, {}).items()}


async def limited_job(ctx: Context, n: int) -> int:
    return n


def report(tokens: int, cost: float) -> int:
    current_step().used(tokens=tokens, cost=cost)
    return tokens


async def model_calls(ctx: Context, tokens: list[int]) -> int:
    total = 0
    for i, n in enumerate(tokens):
        total += await ctx.run(f"call-{i}", report, n, 0.25, limit=["llm", "tenant:acme"], tokens=1000)
    return total


@pytest.mark.parametrize("kind", STORES)
async def test_limits_show_units_held_waiting_and_tokens_reported(kind, request, tmp_path):
    async with Engine.open(store_target(kind, request, tmp_path)) as engine:
        metrics = Metrics(engine.store)
        assert _by(_scrape(metrics), "journal_limit_in_use", "limit") == {}  # no limit: no series
        await engine.limits.set("db", concurrency=2)
        await engine.limits.set("llm", tokens="100000/m")
        await engine.limits.set("tenant:*", concurrency=5)
        table = engine.store.limits()
        held = [Request(f"holder-{n}", ("db",), "test", HOST, os.getpid()) for n in range(2)]
        for hold in held:
            assert str(table.acquire(hold)) == "Granted()"
        for n in range(3):
            await engine.start(limited_job, n, id=f"waits-{n}", limit="db")
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(engine.serve, concurrency=8))
            with anyio.fail_after(60):
                while (await engine.limits.get("db")).waiting < 3:  # all three in line behind the holders
                    await anyio.sleep(0.01)
            samples = _scrape(metrics)
            assert _by(samples, "journal_limit_in_use", "limit")["db"] == 2
            assert _by(samples, "journal_limit_waiting", "limit")["db"] == 3
            for hold in held:
                table.release(hold.hid, hold.names)
            with anyio.fail_after(60):
                for n in range(3):
                    while (await engine.get(f"waits-{n}")).status != "completed":
                        await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        outcome = await engine.run(model_calls, [120, 30], id="tokens")
        assert outcome.result == 150
        samples = _scrape(metrics)
    in_use = _by(samples, "journal_limit_in_use", "limit")
    assert in_use == {"db": 0, "llm": 0, "tenant:acme": 0}  # the prefix rule's own line is no series
    assert _by(samples, "journal_limit_waiting", "limit") == {"db": 0, "llm": 0, "tenant:acme": 0}
    tokens = _by(samples, "journal_limit_tokens_total", "limit")
    # The reported usage settled each step's estimate of 1000, under the rule and under the prefix.
    assert tokens == {"db": 0, "llm": 150, "tenant:acme": 150}


async def spender(ctx: Context, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.run(f"call-{i}", report, 40, 0.125)
    return total


@pytest.mark.parametrize("kind", STORES)
async def test_a_budget_shows_what_its_scope_used_and_its_allowance(kind, request, tmp_path):
    async with Engine.open(store_target(kind, request, tmp_path)) as engine:
        metrics = Metrics(engine.store)
        await engine.budgets.set("key:acme", tokens=1000, cost=5.0)
        await engine.budgets.set("key:other", tokens=500)
        assert (await engine.run(spender, 3, id="a1", key="acme")).result == 120
        assert (await engine.run(spender, 2, id="a2", key="acme")).result == 80
        assert (await engine.run(spender, 1, id="n1", key="nobody")).result == 40  # under no budget
        samples = _scrape(metrics)
    used = {(dict(k)["scope"], dict(k)["unit"]): v for k, v in samples["journal_budget_used"].items()}
    assert used == {("key:acme", "tokens"): 200, ("key:acme", "cost"): 0.625,
                    ("key:other", "tokens"): 0, ("key:other", "cost"): 0}
    allowed = {(dict(k)["scope"], dict(k)["unit"]): v for k, v in samples["journal_budget_allowed"].items()}
    assert allowed == {("key:acme", "tokens"): 1000, ("key:acme", "cost"): 5.0, ("key:other", "tokens"): 500}


@pytest.mark.parametrize("kind", STORES)
async def test_a_schedule_whose_tick_is_late_shows_its_lag_until_it_fires(kind, request, tmp_path):
    began = time.time()
    made = int(began) - 5400  # the schedules start an hour and a half ago, made then by a worker's clock
    clock = [made + 0.5]
    async with Engine.open(store_target(kind, request, tmp_path), clock=lambda: clock[0]) as engine:
        metrics = Metrics(engine.store)
        start = datetime.datetime.fromtimestamp(made, datetime.UTC)
        await engine.schedules.add("hourly", "report", every=3600, start_at=start, catch_up=7200)
        await engine.schedules.add("held", "report", every=3600, start_at=start)
        await engine.schedules.pause("held")
        await engine.schedules.add("later", "report", every=3 * 3600, start_at=start)  # due in 1.5 h
        lag = _by(_scrape(metrics), "journal_schedule_lag_seconds", "schedule")
        # `hourly`'s first tick fell due 30 minutes ago and no worker has fired it.
        assert 1800 <= lag["hourly"] <= 1800 + (time.time() - made - 5400) + 1
        assert lag["held"] == 0 and lag["later"] == 0  # paused; not due yet
        clock[0] = time.time()  # a worker comes back and fires what is due
        started = await engine.schedules.fire_due()
        assert started == [tick_id("hourly", (made + 3600) * 1_000_000)]  # late, within its catch-up
        lag = _by(_scrape(metrics), "journal_schedule_lag_seconds", "schedule")
    assert lag == {"hourly": 0, "held": 0, "later": 0}  # its next tick is half an hour ahead


def test_names_under_a_prefix_rule_are_bounded_as_labels():
    store = MemoryStore()
    store.limits().set("tenant:*", LimitRule(concurrency=1))
    for n in range(MAX_LIMIT_LABELS + 50):  # one name per customer, each holding its unit
        hold = Request(f"h{n}", (f"tenant:c{n:03d}",), "test", HOST, os.getpid())
        assert str(store.limits().acquire(hold)) == "Granted()"
    assert str(store.limits().acquire(Request("late", ("tenant:c000",), "test", HOST, os.getpid()))) != "Granted()"
    in_use = _by(_scrape(Metrics(store)), "journal_limit_in_use", "limit")
    waiting = _by(_scrape(Metrics(store)), "journal_limit_waiting", "limit")
    assert len(in_use) == MAX_LIMIT_LABELS + 1 and in_use["other"] == 50  # 100 names, the other 50 as one
    assert sum(in_use.values()) == MAX_LIMIT_LABELS + 50
    assert waiting["tenant:c000"] == 1  # the busiest name keeps its label
