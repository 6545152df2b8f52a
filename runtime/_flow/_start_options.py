"""What `Engine.start` takes besides the handler and input (DESIGN.md, "Starting: priority,
delay, debounce, and a busy key"), checked once and turned into the record's fields, so
that the CLI, the HTTP API and Python callers get the same rules and the same messages."""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence

from journal import PRIORITY_MAX, PRIORITY_MIN, InvocationRecord
from journal import check_tags as journal_check_tags

from ._limits._limiter import limit_names


def check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be an integer, got {priority!r}; e.g. priority=10 (higher runs first)")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority {priority} is out of range: use {PRIORITY_MIN} to {PRIORITY_MAX}")
    return priority


def start_time(at_us: int, delay: float | None, start_at: datetime.datetime | None) -> int | None:
    """When a delayed start may run (µs), or None for a start that may run at once."""
    if delay is not None and start_at is not None:
        raise ValueError("give a delay or a start time, not both (delay=SECONDS or start_at=DATETIME)")
    if delay is not None:
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay < 0:
            raise ValueError(f"delay must be a number of seconds, 0 or more, got {delay!r}; e.g. delay=30")
        return at_us + int(delay * 1e6) if delay > 0 else None
    if start_at is not None:
        if not isinstance(start_at, datetime.datetime) or start_at.tzinfo is None:
            raise ValueError(
                f"start_at must be a datetime with a time zone, got {start_at!r}; "
                "e.g. datetime(2030, 1, 1, 9, tzinfo=timezone.utc) or '2030-01-01T09:00:00Z' on the command line")
        return int(start_at.timestamp() * 1_000_000)
    return None


def check_tags(tags: Mapping[str, str] | None) -> dict[str, str]:
    return journal_check_tags(tags)


def check_limits(limit: str | Sequence[str] | None) -> list[str]:
    return list(limit_names(limit))


def apply(record: InvocationRecord, *, priority: int, tags: Mapping[str, str] | None,
          limit: str | Sequence[str] | None, delay: float | None, start_at: datetime.datetime | None) -> None:
    """Set the start options on a new `record` (pending): a delayed one waits on a timer,
    the durable machinery that wakes a sleeping invocation, until its start time."""
    record.priority = check_priority(priority)
    record.tags = check_tags(tags)
    record.limits = check_limits(limit)
    when = start_time(record.created_at, delay, start_at)
    if when is not None and when > record.created_at:
        record.start_at = record.wake_at = when


def debounce_times(debounce: float, debounce_max: float | None, key: str | None, invocation_id: str | None,
                   delayed: int | None) -> tuple[int, int | None]:
    """A debounced start's wait and cap, in µs, checked."""
    if key is None:
        raise ValueError("a debounced start needs a key: it gathers the starts of one handler and key "
                         "(e.g. key='chat-42', debounce=2)")
    if invocation_id is not None:
        raise ValueError("a debounced start chooses its id (every start of the burst gets the same one): "
                         "leave the id out")
    if delayed is not None:
        raise ValueError("give a debounce or a delay, not both")
    for name, value in (("debounce", debounce), ("debounce_max", debounce_max)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise ValueError(f"{name} must be a number of seconds above 0, got {value!r}")
    if debounce_max is not None and debounce_max < debounce:
        raise ValueError(f"debounce_max ({debounce_max:g} s) must be at least the debounce ({debounce:g} s)")
    return int(debounce * 1e6), None if debounce_max is None else int(debounce_max * 1e6)


BUSY_STRATEGIES = ("enqueue", "reject", "interrupt", "rollback")


def check_if_busy(if_busy: str, key: str | None) -> None:
    if if_busy not in BUSY_STRATEGIES:
        raise ValueError(f"if_busy {if_busy!r} is not one of {', '.join(BUSY_STRATEGIES)}")
    if key is None:
        raise ValueError(f"if_busy={if_busy!r} needs a key: it decides what a start does to the key's busy thread")
