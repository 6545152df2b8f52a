"""When a schedule's ticks fall: cron expressions (read by `cronsim`) in a time zone, or a
fixed interval, bounded by the schedule's start and end; all times are µs since the epoch.

An interval's ticks are counted from the start time, or from the epoch. A cron expression is matched against local wall-clock time in the schedule's zone. A wall
time that does not exist (the hour skipped when clocks go forward) is skipped; one that
occurs twice (the hour repeated when they go back) fires once, at its first occurrence.
"""

from __future__ import annotations

import datetime
import zoneinfo

from cronsim import CronSim, CronSimError

from journal import ScheduleRecord

# The usual aliases, as the five fields they stand for (cronsim reads the fields only).
ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
_MAX_SEARCH = 100_000  # wall times looked at for one next tick (an expression that never matches ends)


def fields(expr: str) -> str:
    return ALIASES.get(expr.strip().lower(), expr.strip())


def check_cron(expr: str) -> str:
    try:
        CronSim(fields(expr), datetime.datetime(2000, 1, 1))
    except (CronSimError, ValueError) as exc:
        raise ValueError(f"cron expression {expr!r} is not valid ({exc}); use five fields "
                         "(minute hour day-of-month month day-of-week), e.g. '0 9 * * 1-5', or @hourly, @daily, "
                         "@weekly, @monthly, @yearly") from None
    return expr.strip()


def check_zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"time zone {name!r} is not known; use an IANA name such as UTC, Europe/Paris "
                         "or America/New_York") from None


def _us(moment: datetime.datetime) -> int:
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def next_tick(schedule: ScheduleRecord, after_us: int) -> int | None:
    """The first tick strictly after `after_us`, or None once the schedule has ended."""
    if schedule.start_at is not None and after_us < schedule.start_at:
        after_us = schedule.start_at - 1
    tick = _next_every(schedule, after_us) if schedule.every is not None else _next_cron(schedule, after_us)
    if tick is None or (schedule.end_at is not None and tick >= schedule.end_at):
        return None
    return tick


def _next_every(schedule: ScheduleRecord, after_us: int) -> int:
    assert schedule.every is not None
    # Counted from the start time, or else from the epoch: `every 1h` ticks on the hour (UTC),
    # and the ticks of a range before the schedule existed (a backfill) fall on the same grid.
    step = max(1, int(schedule.every * 1_000_000))
    base = schedule.start_at if schedule.start_at is not None else 0
    return base + ((after_us - base) // step + 1) * step


def _next_cron(schedule: ScheduleRecord, after_us: int) -> int | None:
    assert schedule.cron is not None
    zone = check_zone(schedule.tz)
    after = datetime.datetime.fromtimestamp(after_us / 1e6, datetime.UTC)
    after = after.replace(microsecond=(after_us % 1_000_000))
    wall = after.astimezone(zone).replace(tzinfo=None)
    # From the whole minute before: cronsim yields times after its start, and a wall time
    # whose first occurrence lies after `after_us` (in a repeated hour) must be seen again.
    start = wall.replace(second=0, microsecond=0) - datetime.timedelta(hours=2)
    for n, local in enumerate(CronSim(fields(schedule.cron), start)):
        if n > _MAX_SEARCH:
            return None
        first = local.replace(tzinfo=zone, fold=0)
        if first.astimezone(datetime.UTC).astimezone(zone).replace(tzinfo=None) != local:
            continue  # skipped by a change to summer time: this wall time does not exist
        tick = _us(first)
        if tick > after_us:
            return tick
    return None


def jitter_us(schedule: ScheduleRecord, tick: int) -> int:
    """How late after `tick` it fires: the same for every worker (a hash of name and tick)."""
    return schedule.jitter_us(tick)
