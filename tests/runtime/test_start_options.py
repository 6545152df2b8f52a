"""Start options: priority (claimed highest first, then oldest) and delayed starts."""

import datetime
import time

import anyio
import pytest

from journal import Status
from journal.views import waiting_on
from runtime import Context

from ..waiting import until

pytestmark = pytest.mark.anyio


async def test_one_urgent_invocation_is_claimed_before_a_thousand_queued_ones(open_engine):
    ran: list[str] = []
    release = anyio.Event()

    async def job(ctx: Context, name: str) -> str:
        ran.append(name)
        if name == "blocker":
            await release.wait()  # holds the worker's only slot while the queue builds up
        return name

    async with open_engine(durability="async", poll_interval=0.02) as engine:
        await engine.start(job, "blocker", id="blocker")
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: engine.serve(concurrency=1))
            await until(lambda: ran == ["blocker"], "the blocker to run")
            for i in range(1000):
                await engine.start(job, f"low-{i}", id=f"low-{i}")
            # The worker has the head of the queue in hand, waiting in this process for its slot.
            await until(lambda: "low-0" not in engine.runnable(), "the worker to take the queue's head")
            await engine.start(job, "urgent", id="urgent", priority=10)
            await until(lambda: "urgent" not in engine.runnable(), "the worker to take the urgent one")
            release.set()
            await until(lambda: len(ran) >= 3, "two more runs")
            tg.cancel_scope.cancel()
    assert ran[:3] == ["blocker", "urgent", "low-0"]


async def test_pending_invocations_are_claimed_by_priority_then_age(open_engine):
    ran: list[str] = []

    async def job(ctx: Context, name: str) -> str:
        ran.append(name)
        return name

    async with open_engine(durability="async") as engine:
        for name, priority in [("a", 0), ("b", 5), ("c", -1), ("d", 5), ("e", 0)]:
            await engine.start(job, name, id=name, priority=priority)
        assert engine.store.ready() == ["b", "d", "a", "e", "c"]
        await engine.serve(concurrency=1, idle_exit=True)
    assert ran == ["b", "d", "a", "e", "c"]


async def test_a_delayed_start_is_not_claimed_before_its_time_and_is_after(open_engine):
    ran: list[float] = []

    async def job(ctx: Context) -> str:
        ran.append(time.time())
        return "ran"

    async with open_engine(poll_interval=0.02) as engine:
        asked = time.time()
        record = await engine.start(job, id="later", delay=0.6)
        assert record.status == Status.PENDING and record.start_at is not None
        assert record.start_at - int(asked * 1e6) >= 600_000
        assert waiting_on(record) == [{"kind": "timer", "until": _iso(record.start_at)}]
        assert engine.runnable() == [] and engine.store.ready() == []
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.serve)
            await until(lambda: engine.store.get("later").finished, "the delayed start to run")
            tg.cancel_scope.cancel()
    assert len(ran) == 1 and ran[0] * 1e6 >= record.start_at
    assert (await _outcome(open_engine, "later")) == "ran"


async def test_start_at_in_the_past_runs_at_once_and_bad_options_are_refused(open_engine):
    async def job(ctx: Context) -> str:
        return "ran"

    async with open_engine() as engine:
        past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
        record = await engine.start(job, id="now", start_at=past)
        assert record.start_at is None and engine.store.ready() == ["now"]
        with pytest.raises(ValueError, match="time zone"):
            await engine.start(job, id="naive", start_at=datetime.datetime(2030, 1, 1))
        with pytest.raises(ValueError, match="not both"):
            await engine.start(job, id="both", delay=1, start_at=past)
        with pytest.raises(ValueError, match="priority must be an integer"):
            await engine.start(job, id="p", priority="high")
        assert engine.store.get("naive") is None and engine.store.get("both") is None


async def test_engine_run_with_a_delay_waits_then_runs(open_engine):
    async def job(ctx: Context) -> str:
        return "ran"

    async with open_engine() as engine:
        begun = time.time()
        out = await engine.run(job, id="r", delay=0.3)
        assert out.result == "ran" and time.time() - begun >= 0.3


def _iso(us: int) -> str:
    from journal import iso_from_us

    return iso_from_us(us)


async def _outcome(open_engine, invocation_id):
    async with open_engine() as engine:
        return (await engine.get(invocation_id)).result


async def test_twenty_debounced_starts_in_a_burst_give_one_run_with_the_last_input(open_engine):
    ran: list[str] = []

    async def reply(ctx: Context, message: str) -> str:
        ran.append(message)
        return message

    async with open_engine(poll_interval=0.02) as engine:
        ids = [(await engine.start(reply, f"message {i}", key="chat", debounce=0.5)).id for i in range(20)]
        assert len(set(ids)) == 1
        record = engine.store.get(ids[0])
        assert record.status == Status.PENDING and record.start_at is not None
        assert engine.store.ids(Status.PENDING) == ids[:1]  # one invocation, however many starts
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.serve)
            await until(lambda: engine.store.get(ids[0]).finished, "the debounced run")
            tg.cancel_scope.cancel()
        assert (await engine.get(ids[0])).result == "message 19"
        # Begun, it gathers no more: the next burst is another invocation.
        later = await engine.start(reply, "after", key="chat", debounce=0.5)
        assert later.id != ids[0]
    assert ran == ["message 19"]


async def test_concurrent_debounced_starts_share_one_invocation(open_engine):
    async def reply(ctx: Context, message: str) -> str:
        return message

    async with open_engine() as engine:
        ids: list[str] = []

        async def one(i: int) -> None:
            ids.append((await engine.start(reply, f"m{i}", key="k", debounce=30)).id)

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i)
        assert len(ids) == 20 and len(set(ids)) == 1
        assert engine.store.ids(Status.PENDING) == ids[:1]


async def test_debounce_max_caps_how_far_the_start_moves(open_engine):
    async def reply(ctx: Context, message: str) -> str:
        return message

    async with open_engine() as engine:
        first = await engine.start(reply, "a", key="k", debounce=10, debounce_max=20)
        assert first.start_at - first.created_at == 10_000_000
        for i in range(3):
            moved = await engine.start(reply, f"b{i}", key="k", debounce=10, debounce_max=20)
        assert moved.id == first.id and moved.start_at <= first.created_at + 20_000_000
        assert moved.start_at > first.start_at
        with pytest.raises(ValueError, match="needs a key"):
            await engine.start(reply, "x", debounce=1)
        with pytest.raises(ValueError, match="at least the debounce"):
            await engine.start(reply, "x", key="k", debounce=5, debounce_max=1)


async def test_a_serving_worker_holds_no_more_than_its_window_of_a_long_queue(open_engine):
    """Every look, polls included, would take another window of the queue into this process
    (tasks waiting for a slot) if what it holds were not bounded."""
    release = anyio.Event()
    ran: list[str] = []

    async def job(ctx: Context, name: str) -> str:
        ran.append(name)
        await release.wait()  # every slot stays taken while the worker looks again and again
        return name

    async with open_engine(durability="async", poll_interval=0.01) as engine:
        for i in range(600):
            await engine.start(job, f"low-{i}", id=f"low-{i:03d}")
        worker = engine._worker
        looks = 0
        look = worker.runnable

        def counted() -> list[str]:
            nonlocal looks
            looks += 1
            return look()

        worker.runnable = counted
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: engine.serve(concurrency=4))
            await until(lambda: looks >= 4 and len(ran) == 4, "four looks with every slot taken")
            held = len(worker.active)
            await engine.start(job, "urgent", id="urgent", priority=10)
            await until(lambda: "urgent" in worker.active, "the worker to take the urgent one")
            release.set()
            await until(lambda: "urgent" in ran, "the urgent one to run")
            tg.cancel_scope.cancel()
    assert held <= 64  # max(64, 4 x concurrency) in hand, not a window more per look
    assert ran.index("urgent") <= 8  # after the four that held the slots (and those already handed one)
