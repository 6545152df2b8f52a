"""`engine.schedules`: schedules kept in the store, managed at runtime, fired by every worker.

Each tick starts one invocation with the id `NAME@<tick, ISO 8601 UTC>` and the tag
`schedule=NAME`. Exactly once per tick, however many workers fire: a tick is started only
in the transaction that moves the schedule past it (`Store.advance_schedule`, refused if
another worker moved it first), and its id makes even a repeated start of it (a backfill
run twice) attach to the invocation that exists. No tick is lost: the schedule records the
first tick not yet handled, so a worker that starts after an outage finds every tick since,
and starts or counts each one (`catch_up`).
"""

from __future__ import annotations

import builtins
import datetime
import functools
import logging
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from journal import (
    OVERLAPS,
    RECENT_KEPT,
    Create,
    Fired,
    InvocationRecord,
    ScheduleRecord,
    Started,
    Status,
    Store,
    digest,
    encode_entry,
    encode_value,
)
from journal.errors import JournalError

from . import _fire
from ._ticks import check_cron, check_zone, next_tick

if TYPE_CHECKING:
    from journal import Committer

_log = logging.getLogger("journal")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_RESCAN_US = 1_000_000  # new or changed schedules are seen within this
_BATCH = 256  # schedules moved on in one transaction


def _us(moment: datetime.datetime | None, what: str) -> int | None:
    if moment is None:
        return None
    if not isinstance(moment, datetime.datetime) or moment.tzinfo is None:
        raise ValueError(f"{what} must be a datetime with a time zone, got {moment!r}")
    return int(moment.timestamp() * 1_000_000)


class Schedules:
    """The schedules of one engine's store (`engine.schedules`)."""

    def __init__(self, store: Store, committer: Committer, clock: Callable[[], float]) -> None:
        self._store = store
        self._read = committer.read
        self._committer = committer
        self._clock = clock
        self._next_look = 0  # µs: no schedule needs a look before then (`fire_due`)
        self._failed: dict[str, str] = {}  # schedules that could not fire, and why (said once)
        self._scanned = 0
        self._known: builtins.list[ScheduleRecord] | None = None  # the schedules as the last look left them

    def now_us(self) -> int:
        return int(self._clock() * 1_000_000)

    # -- managing ---------------------------------------------------------------------------

    async def add(self, name: str, target: str, *, cron: str | None = None, every: float | None = None,
                  input: Any = None, key: str | None = None, tz: str = "UTC", overlap: str = "skip",
                  catch_up: float = 60.0, jitter: float = 0.0, start_at: datetime.datetime | None = None,
                  end_at: datetime.datetime | None = None, priority: int = 0,
                  limit: str | Sequence[str] | None = None, replace: bool = False) -> ScheduleRecord:
        """Add a schedule (`replace=True`: or change the one of that name; where it stands is kept)."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"schedule name {name!r} is not acceptable: 1 to 100 of A-Z a-z 0-9 . _ -, "
                             "starting with a letter or digit")
        if (cron is None) == (every is None):
            raise ValueError("give a schedule either cron (e.g. '0 9 * * 1-5') or every (seconds), not both")
        if cron is not None:
            cron = check_cron(cron)
        if every is not None and (isinstance(every, bool) or not isinstance(every, (int, float)) or every <= 0):
            raise ValueError(f"every must be a number of seconds above 0, got {every!r}")
        check_zone(tz)
        if overlap not in OVERLAPS:
            raise ValueError(f"overlap {overlap!r} is not one of {', '.join(OVERLAPS)}")
        for what, value in (("catch_up", catch_up), ("jitter", jitter)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{what} must be a number of seconds, 0 or more, got {value!r}")
        from .._start_options import check_limits, check_priority

        start_us, end_us = _us(start_at, "start_at"), _us(end_at, "end_at")
        if start_us is not None and end_us is not None and end_us <= start_us:
            raise ValueError("end_at must come after start_at")
        now = self.now_us()
        record = ScheduleRecord(
            name=name, target=target, cron=cron, every=float(every) if every is not None else None, tz=tz,
            input=bytes(encode_value(input)), key=key, overlap=overlap, catch_up=float(catch_up),
            jitter=float(jitter), start_at=start_us, end_at=end_us, priority=check_priority(priority),
            limits=check_limits(limit), created_at=now)
        existing = await self._read(self._store.schedule, name) if replace else None
        if existing is not None:  # where it stands is kept; its ticks from now on follow the new rule
            record = msgspec.structs.replace(record, created_at=existing.created_at, paused=existing.paused,
                                             note=existing.note, skipped=existing.skipped,
                                             last_id=existing.last_id, recent=existing.recent)
        record.next_tick = next_tick(record, now)
        self._creation(record, now, now)  # a tick's entry 0 must fit the store: refused now, not at each tick
        stored = await self._read(functools.partial(self._store.put_schedule, record, replace=replace))
        self._next_look, self._known = 0, None
        return stored

    async def list(self) -> list[ScheduleRecord]:
        return await self._read(self._store.schedules)

    async def get(self, name: str) -> ScheduleRecord:
        record = await self._read(self._store.schedule, name)
        if record is None:
            raise LookupError(f"no schedule {name!r}; `journal schedule ls` lists them")
        return record

    async def remove(self, name: str) -> None:
        if not await self._read(self._store.delete_schedule, name):
            raise LookupError(f"no schedule {name!r}; `journal schedule ls` lists them")

    async def pause(self, name: str, note: str | None = None) -> ScheduleRecord:
        return await self._change(name, lambda r: msgspec.structs.replace(r, paused=True, note=note))

    async def resume(self, name: str) -> ScheduleRecord:
        """Fire again; ticks missed while paused follow the catch-up rule like any missed tick."""
        self._next_look, self._known = 0, None
        return await self._change(name, lambda r: msgspec.structs.replace(r, paused=False, note=None))

    async def trigger(self, name: str) -> str:
        """Start one run now (whatever the overlap policy), as a tick at this instant: its id."""
        at = self.now_us()
        invocation_id = _fire.tick_id(name, at)

        def started(r: ScheduleRecord) -> ScheduleRecord:
            return msgspec.structs.replace(r, last_id=invocation_id,
                                           recent=[Fired(at, invocation_id), *r.recent][:RECENT_KEPT])

        await self._change(name, started, lambda r: [self._creation(r, at, at)])
        return invocation_id

    async def backfill(self, name: str, start: datetime.datetime, end: datetime.datetime) -> builtins.list[tuple[str, bool]]:
        """Start the ticks in [start, end) that have no invocation yet: `(id, started now)`
        for each tick, oldest first; a tick started before (a backfill run twice) is not
        started again. The overlap policy does not apply: every tick in the range runs."""
        start_us, end_us = _us(start, "start"), _us(end, "end")
        assert start_us is not None and end_us is not None
        if end_us <= start_us:
            raise ValueError("a backfill's end must come after its start")
        schedule = await self.get(name)
        ticks: builtins.list[int] = []
        tick = next_tick(msgspec.structs.replace(schedule, start_at=None, end_at=None), start_us - 1)
        while tick is not None and tick < end_us:
            ticks.append(tick)
            if len(ticks) > 10_000:
                raise ValueError("a backfill starts at most 10,000 ticks at once; give a shorter range")
            tick = next_tick(msgspec.structs.replace(schedule, start_at=None, end_at=None), tick)
        existed = {t: await self._read(self._store.get, _fire.tick_id(name, t)) is not None for t in ticks}
        now = self.now_us()
        await self._change(name, lambda r: r, lambda r: [self._creation(r, t, now) for t in ticks])
        return [(_fire.tick_id(name, t), not existed[t]) for t in ticks]

    async def _change(self, name: str, change: Callable[[ScheduleRecord], ScheduleRecord],
                      creates: Callable[[ScheduleRecord], builtins.list[Create]] = lambda r: []) -> ScheduleRecord:
        while True:  # moved meanwhile by a worker's firing: read it again and redo the change
            record = await self.get(name)
            changed = change(record)
            if await self._read(self._store.advance_schedule, changed, record.version, creates(record)):
                await self._committer.flush()
                return msgspec.structs.replace(changed, version=record.version + 1)

    # -- firing -----------------------------------------------------------------------------

    async def fire_due(self) -> builtins.list[str]:
        """Start every tick that is due, on every schedule: the ids started. Every worker calls
        it, in a task of its own (`Worker.serve`), a few times a second; it reads the
        schedules only when one is due, or once a second to see new ones. The due ones move
        on in transactions of `_BATCH` schedules (a minute's tick of ten thousand schedules
        is not ten thousand commits), taken in an order of this worker's own; a schedule
        that another worker is moving at that moment is left to it, not waited for, so two
        workers share a tick's work rather than race on it."""
        now = self.now_us()
        if now < self._next_look and now - self._scanned < _RESCAN_US:
            return []
        started: builtins.list[str] = []
        if now - self._scanned < _RESCAN_US and self._known is not None:
            # A tick is due by the schedules as the last look left them, read less than
            # `_RESCAN_US` ago: fired from those, not from all of them read again first (a
            # tenth of a second or more for ten thousand, before the first could start).
            # Each is read as it stands in its batch's transaction when it fires.
            schedules = self._known
        else:
            self._scanned = now
            schedules = await self._read(self._store.schedules)
        due = [s for s in schedules if s.buffered or ((at := _fire.due_at(s)) is not None and at <= now)]
        latest = {s.name: s for s in schedules}
        batches = [due[n:n + _BATCH] for n in range(0, len(due), _BATCH)]
        random.shuffle(batches)
        for batch in batches:
            moved, again, held = await self._read(self._fire_batch, batch, now, started)
            latest.update(moved)
            for name in held:  # where another worker leaves it is read at the next look
                latest.pop(name, None)
            for schedule in again:
                latest[schedule.name] = await self._fire_alone(schedule, now, started)
        next_look = now + _RESCAN_US
        for schedule in latest.values():
            at = _fire.due_at(schedule)
            if schedule.buffered and not schedule.paused:
                at = now + 250_000  # waiting for the run before it to end
            if at is not None:
                next_look = min(next_look, at)
        if started:
            await self._committer.flush()
        self._next_look = next_look
        self._known = builtins.list(latest.values())
        return started

    def _fire_batch(self, batch: builtins.list[ScheduleRecord], now: int, started: builtins.list[str]
                    ) -> tuple[dict[str, ScheduleRecord], builtins.list[ScheduleRecord], builtins.list[str]]:
        """Fire `batch` in one transaction (in a thread: `Store.fire_schedules`, which reads
        each schedule as it stands, so one another worker moved since this pass read it is
        seen moved and left): the schedules as they now stand, those left to `_fire_alone`
        (the batch could not commit), and the names of those another worker holds (or that
        are gone)."""
        at = self.now_us()  # the invocations' creation: this batch's, not the pass's (a pass takes a while)
        decided: dict[str, builtins.list[Create]] = {}

        def decide(schedule: ScheduleRecord, last: InvocationRecord | None
                   ) -> tuple[ScheduleRecord, builtins.list[Create], builtins.list[str]] | None:
            plan = _fire.plan(schedule, now, last)
            if plan is None:
                decided.pop(schedule.name, None)
                return None
            decided[schedule.name] = creates = [self._creation(schedule, tick, at) for tick in plan.starts]
            return plan.record, creates, plan.cancels

        try:
            found = self._store.fire_schedules([s.name for s in batch], decide)
        except (JournalError, ValueError):
            return {}, batch, []  # one of them cannot be started: each alone, said once
        moved: dict[str, ScheduleRecord] = {}
        held: builtins.list[str] = []
        for schedule, result in zip(batch, found, strict=True):
            if result is None:
                held.append(schedule.name)
                continue
            moved[schedule.name], fired = result
            if fired:
                started += [op.record.id for op in decided[schedule.name]]
                self._failed.pop(schedule.name, None)
        return moved, [], held

    async def _fire_alone(self, schedule: ScheduleRecord, now: int, started: builtins.list[str]) -> ScheduleRecord:
        try:
            return await self._fire_one(schedule, now, started)
        except (JournalError, ValueError) as exc:
            # One schedule that cannot fire (its input too large for the store, a record
            # of its last run that does not decode) stops neither the others nor the worker.
            if self._failed.get(schedule.name) != str(exc):
                self._failed[schedule.name] = str(exc)
                _log.warning("schedule %r could not fire: %s", schedule.name, exc)
            return schedule

    async def _fire_one(self, schedule: ScheduleRecord, now: int, started: builtins.list[str]) -> ScheduleRecord:
        for _ in range(20):  # another worker moved it: read it again (it started those ticks)
            last = await self._read(self._store.get, schedule.last_id) if schedule.last_id else None
            planned = _fire.plan(schedule, now, last)
            if planned is None:
                break
            creates = [self._creation(schedule, tick, now) for tick in planned.starts]
            if await self._read(self._store.advance_schedule, planned.record, schedule.version, creates,
                                planned.cancels):
                started += [op.record.id for op in creates]
                self._failed.pop(schedule.name, None)
                return msgspec.structs.replace(planned.record, version=schedule.version + 1)
            found = await self._read(self._store.schedule, schedule.name)
            if found is None:
                break
            schedule = found
        return schedule

    def _creation(self, schedule: ScheduleRecord, tick: int, now: int) -> Create:
        raw = msgspec.Raw(schedule.input)
        input_digest = digest(schedule.input)
        record = InvocationRecord(_fire.tick_id(schedule.name, tick), schedule.target, Status.PENDING, now, now,
                                  schedule.key, input_digest, priority=schedule.priority,
                                  tags={"schedule": schedule.name}, limits=list(schedule.limits))
        entry = Started(schedule.target, raw, now, schedule.key, input_digest, None, None)
        return Create(record, encode_entry(entry, self._store.max_entry_bytes))


def wall_clock() -> float:
    return time.time()
