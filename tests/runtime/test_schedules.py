"""Schedules with a clock the test sets: catch-up, overlap policies, a DST change,
pause/resume, trigger and backfill (what `fire_due` starts, as every worker calls it)."""

import datetime

import pytest

from journal import Status
from runtime import Context

pytestmark = pytest.mark.anyio

UTC = datetime.UTC


class Clock:
    """Seconds since the epoch, moved by the test."""

    def __init__(self, when: datetime.datetime) -> None:
        self.now = when.timestamp()

    def __call__(self) -> float:
        return self.now

    def set(self, when: datetime.datetime) -> None:
        self.now = when.timestamp()


T0 = datetime.datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


async def nightly(ctx: Context, input: dict | None = None) -> str:
    return f"ran {input}"


async def _finish(engine, invocation_id):
    out = await engine.resume(invocation_id)
    assert out.status == Status.COMPLETED, out


def _at(**delta) -> datetime.datetime:
    return T0 + datetime.timedelta(**delta)


async def test_each_tick_starts_one_invocation_named_by_its_time_and_tagged(open_engine):
    clock = Clock(T0)
    async with open_engine(clock=clock) as engine:
        await engine.schedules.add("report", _path(nightly), every=60, input={"n": 1})
        assert await engine.schedules.fire_due() == []  # the first tick is a minute away
        clock.set(_at(minutes=1))
        assert await engine.schedules.fire_due() == ["report@2026-06-01T12:01:00Z"]
        assert await engine.schedules.fire_due() == []  # fired once
        record = engine.store.get("report@2026-06-01T12:01:00Z")
        assert record.tags == {"schedule": "report"} and record.status == Status.PENDING
        await _finish(engine, record.id)
        assert (await engine.get(record.id)).result == "ran {'n': 1}"
        shown = await engine.schedules.get("report")
        assert shown.recent[0].id == record.id and shown.next_tick == int(_at(minutes=2).timestamp() * 1e6)


async def test_missed_ticks_within_catch_up_start_oldest_first_and_the_rest_are_counted(open_engine):
    clock = Clock(T0)
    async with open_engine(clock=clock) as engine:
        await engine.schedules.add("tick", _path(nightly), every=10, catch_up=20)
        # No worker for five ticks (12:00:10 ... 12:00:50); at 12:00:55 the window covers two.
        clock.set(_at(seconds=55))
        started = await engine.schedules.fire_due()
        assert started == ["tick@2026-06-01T12:00:40Z", "tick@2026-06-01T12:00:50Z"]
        assert (await engine.schedules.get("tick")).skipped == 3


@pytest.mark.parametrize(("overlap", "started_at_second_tick", "skipped", "buffered"), [
    ("skip", [], 1, []),
    ("buffer-one", [], 0, [2]),
    ("buffer-all", [], 0, [2]),
    ("allow-all", ["p@2026-06-01T12:02:00Z"], 0, []),
    ("cancel-other", ["p@2026-06-01T12:02:00Z"], 0, []),
])
async def test_overlap_policy_decides_a_tick_whose_previous_run_is_unfinished(
        open_engine, overlap, started_at_second_tick, skipped, buffered):
    clock = Clock(T0)
    async with open_engine(clock=clock) as engine:
        await engine.schedules.add("p", _path(nightly), every=60, overlap=overlap)
        clock.set(_at(minutes=1))
        assert await engine.schedules.fire_due() == ["p@2026-06-01T12:01:00Z"]
        clock.set(_at(minutes=2))  # the first run has not run yet: unfinished
        assert await engine.schedules.fire_due() == started_at_second_tick
        schedule = await engine.schedules.get("p")
        assert schedule.skipped == skipped
        assert [int((t / 1e6 - T0.timestamp()) / 60) for t in schedule.buffered] == buffered
        first = engine.store.get("p@2026-06-01T12:01:00Z")
        assert first.cancel_requested == (overlap == "cancel-other")
        if overlap == "buffer-all":
            clock.set(_at(minutes=3))
            assert await engine.schedules.fire_due() == []
            assert len((await engine.schedules.get("p")).buffered) == 2
        if buffered:  # the first run ends: the buffered tick starts at the next look
            await _finish(engine, first.id)
            clock.set(_at(minutes=3, seconds=1))
            fired = await engine.schedules.fire_due()
            assert fired[0] == "p@2026-06-01T12:02:00Z"


async def test_a_paris_schedule_skips_the_missing_hour_and_fires_the_repeated_one_once(open_engine):
    clock = Clock(datetime.datetime(2026, 3, 28, 0, 0, tzinfo=UTC))
    async with open_engine(clock=clock) as engine:
        await engine.schedules.add("night", _path(nightly), cron="30 2 * * *", tz="Europe/Paris", catch_up=3600)
        fired = []
        # Every half hour through two DST changes: 29 March (02:00 -> 03:00) and 25 October
        # (03:00 -> 02:00), watching the days around each.
        for day in (datetime.datetime(2026, 3, 28, tzinfo=UTC), datetime.datetime(2026, 10, 24, tzinfo=UTC)):
            for half_hours in range(4 * 48):
                clock.set(day + datetime.timedelta(minutes=30 * half_hours))
                fired += await engine.schedules.fire_due()
                for invocation_id in fired:
                    record = engine.store.get(invocation_id)
                    if not record.finished:
                        await _finish(engine, invocation_id)
        assert fired == [
            "night@2026-03-28T01:30:00Z",  # 02:30 CET
            # 29 March: 02:30 does not exist in Paris; nothing
            "night@2026-03-30T00:30:00Z", "night@2026-03-31T00:30:00Z",  # 02:30 CEST
            "night@2026-10-24T00:30:00Z",
            "night@2026-10-25T00:30:00Z",  # 02:30 CEST; the second 02:30 (CET, 01:30Z) does not fire
            "night@2026-10-26T01:30:00Z",  # 02:30 CET
            "night@2026-10-27T01:30:00Z",
        ]


async def test_pause_stops_firing_with_a_note_and_resume_goes_on(open_engine):
    clock = Clock(T0)
    async with open_engine(clock=clock) as engine:
        await engine.schedules.add("p", _path(nightly), every=60, catch_up=120)
        paused = await engine.schedules.pause("p", note="provider outage")
        assert paused.paused and paused.note == "provider outage"
        clock.set(_at(minutes=1))
        assert await engine.schedules.fire_due() == []
        resumed = await engine.schedules.resume("p")
        assert not resumed.paused and resumed.note is None
        assert await engine.schedules.fire_due() == ["p@2026-06-01T12:01:00Z"]


async def test_backfill_starts_each_tick_of_the_range_once_even_when_run_twice(open_engine):
    clock = Clock(T0)
    async with open_engine(clock=clock) as engine:
        await engine.schedules.add("h", _path(nightly), cron="@hourly")
        start, end = datetime.datetime(2026, 5, 1, 0, 0, tzinfo=UTC), datetime.datetime(2026, 5, 1, 3, 0, tzinfo=UTC)
        first = await engine.schedules.backfill("h", start, end)
        assert first == [("h@2026-05-01T00:00:00Z", True), ("h@2026-05-01T01:00:00Z", True),
                         ("h@2026-05-01T02:00:00Z", True)]
        again = await engine.schedules.backfill("h", start, end)
        assert [started for _, started in again] == [False, False, False]
        assert sorted(engine.store.ids(Status.PENDING)) == [i for i, _ in first]


async def test_trigger_starts_one_run_now_and_bad_definitions_are_refused(open_engine):
    clock = Clock(T0)
    async with open_engine(clock=clock) as engine:
        await engine.schedules.add("t", _path(nightly), cron="0 9 * * 1-5")
        assert await engine.schedules.trigger("t") == "t@2026-06-01T12:00:00Z"
        assert (await engine.schedules.get("t")).last_id == "t@2026-06-01T12:00:00Z"
        with pytest.raises(ValueError, match="not valid"):
            await engine.schedules.add("bad", _path(nightly), cron="every day")
        with pytest.raises(ValueError, match="not known"):
            await engine.schedules.add("bad", _path(nightly), every=5, tz="Mars/Olympus")
        with pytest.raises(ValueError, match="not both"):
            await engine.schedules.add("bad", _path(nightly), every=5, cron="@daily")
        with pytest.raises(LookupError, match="no schedule"):
            await engine.schedules.pause("ghost")
        assert [s.name for s in await engine.schedules.list()] == ["t"]


async def test_two_workers_firing_one_tick_of_many_schedules_start_each_once(open_engine):
    """More schedules due at once than one transaction moves (`_BATCH`): two workers firing
    together share them; every tick has its one invocation, none is started twice."""

    from runtime._flow._schedules import Schedules

    clock = Clock(T0)
    async with open_engine(clock=clock) as engine:
        other = Schedules(engine.store, engine.committer, clock)
        fired = await _fire_together(engine, clock, engine.schedules, other)
        expected = sorted(f"s{n:03d}@2026-06-01T12:01:00Z" for n in range(600))
        assert sorted(fired["one"] + fired["other"]) == expected
        assert all(engine.store.get(i).status == Status.PENDING for i in expected)
        assert await engine.schedules.fire_due() == [] and await other.fire_due() == []
        assert {s.next_tick for s in await engine.schedules.list()} == {int(_at(minutes=2).timestamp() * 1e6)}


def _path(fn):
    from runtime import handler_path

    return handler_path(fn)


async def _fire_together(engine, clock, one, other) -> dict[str, list[str]]:
    """600 schedules every minute added through `engine`, the clock moved to their first
    tick, and `one` and `other` firing it at once: the ids each started."""
    import anyio

    for n in range(600):
        await engine.schedules.add(f"s{n:03d}", _path(nightly), every=60, input=n)
    clock.set(_at(minutes=1))
    fired: dict[str, list[str]] = {}

    async def fire(name, schedules):
        fired[name] = await schedules.fire_due()

    async with anyio.create_task_group() as tg:
        tg.start_soon(fire, "one", one)
        tg.start_soon(fire, "other", other)
    return fired


async def test_two_processes_firing_one_tick_on_postgresql_split_it_without_starting_any_twice(postgres_url):
    """Two stores on one database (two workers' connections): each batch locks its schedules
    without waiting, so each worker fires those the other does not hold at that moment, and
    sees those the other moved as moved."""

    from runtime import Engine

    clock = Clock(T0)
    async with Engine.open(postgres_url, clock=clock) as engine, Engine.open(postgres_url, clock=clock) as other:
        fired = await _fire_together(engine, clock, engine.schedules, other.schedules)
        for _ in range(3):  # a schedule held by the other at the first look is read again at the next
            other.schedules._next_look = engine.schedules._next_look = 0
            fired["one"] += await engine.schedules.fire_due()
            fired["other"] += await other.schedules.fire_due()
        expected = sorted(f"s{n:03d}@2026-06-01T12:01:00Z" for n in range(600))
        assert sorted(fired["one"] + fired["other"]) == expected
        assert {s.next_tick for s in await engine.schedules.list()} == {int(_at(minutes=2).timestamp() * 1e6)}
