"""Firing a schedule: from its record, the statuses of its last runs and the time, which
ticks start now, which wait (an overlap policy's buffer), which are skipped and counted.

`plan` is pure (no store, no clock): `Schedules.fire_due` reads what it needs, plans, and
commits the plan with `Store.advance_schedule`, which refuses it if another worker moved
the schedule meanwhile; that worker then started those ticks, and this one reads again.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import msgspec

from journal import RECENT_KEPT, Fired, InvocationRecord, ScheduleRecord, iso_from_us

from ._ticks import jitter_us, next_tick

_MAX_COUNTED = 100_000  # missed ticks counted one by one; past that the count is a floor
_MAX_STARTS = 1000  # ticks started in one firing (the rest wait for the next look)
MIN_CATCH_UP_US = 1_000_000  # a tick is missed only once it is this late, at least


class Plan(NamedTuple):
    record: ScheduleRecord  # the schedule moved on
    starts: list[int]  # ticks whose invocation starts now, oldest first
    cancels: list[str]  # runs to cancel (overlap cancel-other)


def tick_id(name: str, tick: int) -> str:
    """The invocation id of a tick: `NAME@<tick, ISO 8601 UTC>`."""
    return f"{name}@{_iso(tick)}"


@functools.lru_cache(maxsize=256)
def _iso(tick: int) -> str | None:
    # Schedules on one rule share their ticks: a minute's ten thousand ids name one time.
    return iso_from_us(tick)


def plan(schedule: ScheduleRecord, now_us: int, last: InvocationRecord | None) -> Plan | None:
    """What to do now; None when nothing changes. `last` is the record of the schedule's
    most recent run (`last_id`), to tell whether it is still unfinished."""
    if schedule.paused or (schedule.next_tick is None and not schedule.buffered):
        return None
    record = msgspec.structs.replace(schedule, buffered=list(schedule.buffered), recent=list(schedule.recent))
    busy = last is not None and not last.finished
    starts: list[int] = []
    cancels: list[str] = []
    if record.buffered and not busy:  # the previous run ended: the oldest buffered tick goes
        starts.append(record.buffered.pop(0))
        busy = True
    window_start = now_us - max(int(record.catch_up * 1_000_000), MIN_CATCH_UP_US)
    tick = record.next_tick
    counted = 0
    while tick is not None and tick < window_start and tick + jitter_us(record, tick) <= now_us:
        if counted >= _MAX_COUNTED:  # a long outage: jump to the window, the count a floor
            tick = next_tick(record, window_start - 1)
            break
        record.skipped += 1
        counted += 1
        tick = next_tick(record, tick)
    # Ticks of this one firing (the catch-up of missed ones) do not overlap each other: they
    # start oldest first; the policy decides against a run from before.
    fresh = 0
    while tick is not None and tick + jitter_us(record, tick) <= now_us and len(starts) < _MAX_STARTS:
        if busy and fresh == 0 and record.overlap != "allow-all":
            if record.overlap == "skip":
                record.skipped += 1
            elif record.overlap == "buffer-one":
                if record.buffered:
                    record.skipped += 1
                else:
                    record.buffered.append(tick)
            elif record.overlap == "buffer-all":
                record.buffered.append(tick)
            elif record.overlap == "cancel-other":
                if last is not None and not last.finished:
                    cancels.append(last.id)
                starts.append(tick)
                fresh += 1
        else:
            starts.append(tick)
            fresh += 1
        tick = next_tick(record, tick)
    record.next_tick = tick
    if not starts and not cancels and record == schedule:
        return None
    for started in starts:
        record.recent.insert(0, Fired(started, tick_id(record.name, started)))
    del record.recent[RECENT_KEPT:]
    if starts:
        record.last_id = tick_id(record.name, starts[-1])
    return Plan(record, starts, cancels)


def due_at(schedule: ScheduleRecord) -> int | None:
    """When this schedule next needs a look (µs): its next tick plus jitter; None if never."""
    return schedule.due_at()
