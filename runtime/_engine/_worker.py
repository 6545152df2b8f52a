"""The worker loop: find what is runnable, run it under a concurrency limit, wait for more.

`Engine.serve` (`journal worker`, `journal serve`) and `Engine.recover` are this. Runnable
means pending, running with a dead owner (its lease no longer protects a live process), or
suspended on a timer that is due; a worker given `handlers` takes only invocations it has
the handler for, and leaves the others for a worker that has theirs.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

from journal import Capability, InvocationRecord, Status, WorkBell, now_us
from journal.errors import CorruptEntry, DiskFull, InvocationBusy, LeaseLost
from journal.limits import Blocked

from .._handler._handlers import is_handler_name
from ._executor import Executor, run_hold, run_limits
from ._first_of import first_of
from ._outcome import Outcome

_PAUSE_FIRST, _PAUSE_MAX = 0.5, 5.0  # seconds a worker waits before trying a full disk again
DISK_FULL_WAIT = 60.0
"""Seconds a worker that exits when idle (`journal worker --until-idle`) waits for room on a
full disk before it gives up: a script or a cron job must not hang on it. A worker that runs
until stopped waits as long as it takes."""
_ASK_AGAIN = 5.0  # seconds: how often an invocation behind a full limit keeps its place in line (it is gone after 30)
_FIRE_EVERY = 0.05  # seconds between two calls of `serve`'s `before_look` (a tick starts up to this late)
_PAST_LINE = 64  # windows of the run queue one look reads past invocations waiting in full limits' lines, at most
_KEPT_PER_LOOK = 64  # ... and how many places one look keeps at most (a thousand in line: every 4 s at 0.25 s a look)


class Worker:
    """Runs the runnable invocations of one engine's store."""

    def __init__(self, executor: Executor, handlers: dict[str, Any] | None, poll_interval: float) -> None:
        self.executor = executor
        self.store = executor.store
        self._read = executor.committer.read
        self.handlers = handlers
        self.poll_interval = poll_interval
        self.active: set[str] = set()  # scheduled by `serve` in this process
        self._skipped: set[str] = set()  # left alone, and said so (`_skip`)
        self._paused_until: float | None = None  # taking no work until then: the disk is full (`_pause`)
        self._pause_for = _PAUSE_FIRST
        self._full_since: float | None = None  # when the disk was first found full, this time
        self._full: DiskFull | None = None  # what it said
        self._retry: set[str] = set()  # stopped by a full disk: taken again when the pause ends
        self._in_line = False  # the last look left invocations waiting in a limit's line
        self._asked: dict[str, float] = {}  # invocations in a limit's line: when their place was last kept
        self._lines: dict[str, tuple[int, int, tuple[str, ...]]] = {}  # ... their priority, creation and limits
        self._order: dict[str, tuple[int, int]] = {}  # claim order of what `runnable` found: (-priority, created)
        self._window: int | None = None  # the most pending invocations held in hand (None: all)
        self._took_all = True  # the last look took every pending one it could start
        self._nudged: anyio.Event | None = None  # set when this process made something runnable
        self._bell: WorkBell | None = None  # rung when any process made something runnable (`serve`)
        self._missed: set[str] = set()  # found pending while running here (`runnable`)
        self.found: dict[str, InvocationRecord] = {}  # the records the last look (`runnable`) read

    def nudge(self) -> None:
        """Something this process did made an invocation runnable (a message sent to it): a
        worker that polls looks again now, not at its next poll."""
        if self._nudged is not None:
            self._nudged.set()

    def runnable(self) -> list[str]:
        """Invocations that should run now: pending, running with a dead owner, due timers.

        One whose record does not decode is left alone (the observers told once, `skipped`): a
        damaged record stops nothing but its own invocation. So is one that records a handler
        NAME when this worker was given no handlers: a NAME is no code to import."""
        now = now_us()
        store = self.store
        busy = self.active | self.executor.running
        # Ids first, from the status index: the records of invocations this worker already
        # has in hand (thousands, queued for a turn) are not read again on every look.
        # Pending ones in the order they are claimed (highest priority, then oldest), from
        # the store's run queue; a delayed start is among the due timers once it is due.
        # While serving, only the head of the queue, and no more than `_window` in hand: a look
        # costs the same with a hundred or a hundred thousand waiting, and so does what this
        # process holds (every look, polls included, would otherwise take another window).
        if self._window is None:
            head = store.ready()
            ids = [i for i in head if i not in busy]
        else:
            # Those in hand that wait for a slot are still pending, so among the head: any that
            # comes before one of them outranks it (a later start of higher priority) and is
            # taken whatever the room; after the last of them, only as many as there is room.
            limit = len(busy) + self._window
            head = store.ready(limit)
            cut = max((n for n, i in enumerate(head) if i in busy), default=-1)
            after = head[cut + 1:]
            room = max(0, self._window - len(self.active))
            ids = [i for i in head[:max(cut, 0)] if i not in busy] + after[:room]
            self._took_all = len(head) < limit and len(after) <= room
        # Pending while it still runs here: made runnable again (a message) after its run
        # suspended and before that run ended. Nobody rings (or notifies) again for it, so
        # `serve` runs it again as soon as that run ends, rather than at the next look.
        self._missed = {i for i in head if i in self.executor.running}
        ids += [i for i in store.ids(Status.RUNNING) if i not in busy and store.live_lease(i, now) is None]
        ids += store.due_timers(now)
        # Stopped by a full disk, an invocation whose lease could not be given back either is
        # still leased to this engine, which takes it again (its own lease does not stop it).
        ids += self._retry
        seen: set[str] = set()
        # `seen.add` returns None: the idiom keeps each id's first occurrence, in order.
        ids = [i for i in ids if not (i in seen or seen.add(i)) and i not in busy]  # type: ignore[func-returns-value]
        out: list[str] = []
        in_line: list[InvocationRecord] = []
        read: dict[str, InvocationRecord] = {}
        for invocation_id, record in zip(ids, self._records(ids), strict=True):
            if record is not None:
                read[invocation_id] = record
            self._sort(record, out, in_line)
        self.found = read
        self._in_line = False
        full: set[tuple[str, ...]] = set()
        free = self._free_of_line(in_line, full)
        if self._window is not None and full and len(head) == limit and not out and not free:
            # The whole head waits in the lines of full limits: read on past it, so that an
            # invocation behind them that may run now is not held up by them.
            free = self._read_past_line(head[-1], busy, full)
        return out + free

    def _sort(self, record: InvocationRecord | None, out: list[str], in_line: list[InvocationRecord]) -> None:
        """Put a runnable invocation's id in `out`, or its record in `in_line` if it is under
        limits; leave it if this worker has no code for it."""
        if record is None:
            return
        if self.handlers is not None:
            if record.handler not in self.handlers:  # left for a worker given its handler
                return
        elif is_handler_name(record.handler):
            self._skip(record.id, (
                f"it records the handler name {record.handler!r}, and this worker was given no code for "
                f"it; it stays pending for a worker started with --handler {record.handler}=path/to/file.py:"
                f"function, or run it here: journal resume {record.id} --handler "
                f"{record.handler}=path/to/file.py:function"))
            return
        if record.limits:
            in_line.append(record)
        else:
            out.append(record.id)
            self._order[record.id] = (-record.priority, record.created_at)

    def _read_past_line(self, last: str, busy: set[str], full: set[tuple[str, ...]]) -> list[str]:
        """Walk the run queue on from `last`, a window at a time, to the first invocations
        that may run now, or to its end (at most `_PAST_LINE` windows a look). One known to
        wait in a full limit's line (`_lines`) is passed over without its record being read,
        so a look behind a thousand waiting ones reads the queue's index, not a thousand records."""
        assert self._window is not None
        record = self._record(last)
        place = None if record is None else (record.priority, record.created_at, record.id)
        for _ in range(_PAST_LINE):
            if place is None:
                break
            page = self.store.ready(self._window, after=place)
            out: list[str] = []
            in_line: list[InvocationRecord] = []
            to_read: list[tuple[int, str]] = []  # (position in the page, id): read in one go below
            placed = -1  # the position in the page `place` was last taken from
            for n, invocation_id in enumerate(page):
                known = self._lines.get(invocation_id)
                if known is not None:
                    place, placed = (known[0], known[1], invocation_id), n
                    if known[2] in full and time.monotonic() - self._asked.get(invocation_id, 0.0) < _ASK_AGAIN:
                        continue
                if invocation_id in busy:
                    continue
                to_read.append((n, invocation_id))
            for (n, _), record in zip(to_read, self._records([i for _, i in to_read]), strict=True):
                if record is not None and n > placed:
                    place, placed = (record.priority, record.created_at, record.id), n
                self._sort(record, out, in_line)
            free = self._free_of_line(in_line, full, past_line=True)
            if out or free or len(page) < self._window:
                return out + free
        return []

    def _free_of_line(self, records: list[InvocationRecord], full: set[tuple[str, ...]], *,
                      past_line: bool = False) -> list[str]:
        """The invocations under limits that may run now: each takes its unit, in the order the
        line serves them (priority, then age). Behind one that must wait, the others of the same
        limits wait too: they are asked again (which keeps their place) only every few seconds,
        so a look at a thousand waiting invocations costs a few transactions, not a thousand.
        `full` gathers the limits found full in this look (across calls). Read past the head of
        the run queue (`past_line`), one under a limit found full is not asked at all: it would
        wait behind the head's, and standing every invocation of a long queue in the limit's
        line made each acquisition of that limit read and sort them all (with 1,000 waiting, the
        acquisitions were most of a hand-over's time). It stands in line, in its place by age,
        once it reaches the head."""
        now = time.monotonic()
        out = []
        kept = 0
        for record in sorted(records, key=lambda r: (-r.priority, r.created_at, r.id)):
            names = run_limits(record)
            if past_line and names in full:
                self._asked[record.id] = now  # passed over by the next looks without its record read
                self._lines[record.id] = (record.priority, record.created_at, names)
                self._in_line = True
                continue
            if names in full and record.id in self._asked and (
                    now - self._asked[record.id] < _ASK_AGAIN or kept >= _KEPT_PER_LOOK):
                self._in_line = True
                continue
            if names in full and record.id in self._asked:
                kept += 1  # a place kept: a few a look, so a long line costs no look much
            self._asked[record.id] = now
            if self._unit_free(record):
                self._asked.pop(record.id, None)
                self._lines.pop(record.id, None)
                out.append(record.id)
                self._order[record.id] = (-record.priority, record.created_at)
            else:
                full.add(names)
                self._lines[record.id] = (record.priority, record.created_at, names)
                self._in_line = True
        if len(self._asked) > 4 * len(records) + 1000:  # forget those that left the line elsewhere
            waiting = {r.id for r in records} | {i for i, line in self._lines.items() if line[2] in full}
            self._asked = {i: t for i, t in self._asked.items() if i in waiting}
            self._lines = {i: line for i, line in self._lines.items() if i in self._asked}
        return out

    def _unit_free(self, record: InvocationRecord) -> bool:
        """Take a unit of the invocation's limits for it, or stand it in their line (by priority,
        then age): a worker claims no invocation whose limit is full. The hold is the one the
        execution takes (`run_hold`), so taking it here and there is taking it once."""
        limiter = self.executor.settings.limiter
        request = limiter.request(run_limits(record), hid=run_hold(record.id), priority=record.priority,
                                  label=record.id, arrival=record.created_at)
        return not isinstance(limiter.table.acquire(request), Blocked)

    def _records(self, ids: list[str]) -> list[InvocationRecord | None]:
        """The records of `ids` in one read (one statement on PostgreSQL: a look reads a window
        of them); one by one if any is damaged, so that only that one is left alone."""
        try:
            return self.store.get_many(ids)
        except CorruptEntry:
            return [self._record(i) for i in ids]

    def _record(self, invocation_id: str) -> InvocationRecord | None:
        """The invocation's record; None if it is gone, or damaged (said once, `_skip`)."""
        try:
            return self.store.get(invocation_id)
        except CorruptEntry as exc:
            self._skip(invocation_id, f"{exc}. The other invocations run; `journal check` lists the damage")
            return None

    def _skip(self, invocation_id: str, reason: str) -> None:
        if invocation_id not in self._skipped:
            self._skipped.add(invocation_id)
            self.executor.settings.observers.skipped(invocation_id, reason)

    async def recover(self, *, concurrency: int = 16) -> list[Outcome]:
        """Run once every invocation left pending or orphaned (its owner died or its lease expired)."""
        outcomes: list[Outcome] = []
        gate = _Gate(concurrency)
        executor = self.executor

        async def one(invocation_id: str, ticket: Any) -> None:
            async with gate.turn(ticket):
                try:
                    if await executor.loadable(invocation_id):
                        outcomes.append(await executor.execute(invocation_id))
                except InvocationBusy:
                    pass

        async with anyio.create_task_group() as tg:
            for invocation_id in await self._read(self.runnable):
                tg.start_soon(one, invocation_id, gate.enter(self._order.pop(invocation_id, (0, 0))))
            gate.dispatch()
        return outcomes

    async def serve(self, *, concurrency: int = 16, idle_exit: bool = False,
                    disk_full_wait: float = DISK_FULL_WAIT,
                    before_look: Callable[[], Awaitable[object]] | None = None) -> None:
        """Run whatever becomes runnable until cancelled (or idle, with `idle_exit`). With
        `idle_exit`, a disk that stays full for `disk_full_wait` seconds raises `DiskFull`.
        `before_look` (the engine fires its due schedules) runs in a task of its own every
        `_FIRE_EVERY` seconds, or with `idle_exit` before each look for work."""
        gate = _Gate(concurrency)
        executor = self.executor
        window = self._window = max(64, 4 * concurrency)
        more = False  # the last look left pending ones in the store for want of room

        async def one(invocation_id: str, ticket: Any, record: InvocationRecord | None = None) -> None:
            again = False
            try:
                async with gate.turn(ticket):
                    if await executor.loadable(invocation_id, record):
                        record = None  # (not held while it runs)
                        await executor.execute(invocation_id)
            except (InvocationBusy, LeaseLost):
                pass
            except CorruptEntry as exc:  # its record, damaged since it was listed, or its journal (parked)
                self._skip(invocation_id, f"{exc}. The other invocations run; `journal check` lists the damage")
            except DiskFull as exc:  # it went back to `pending` (or is still leased here); until there is room
                self._retry.add(invocation_id)
                self._pause(exc)
            else:
                self._retry.discard(invocation_id)
                self._went_on()
                again = invocation_id in self._missed
            finally:
                self._missed.discard(invocation_id)
                if not again:  # (run again: it stays this worker's, so no look schedules it twice)
                    self.active.discard(invocation_id)
                    self._order.pop(invocation_id, None)
                if not self.active:
                    settled.set()
                if more and len(self.active) <= window // 2:
                    running_low.set()  # take the next part of the queue now, not at the next poll
            if again:  # made runnable while this run ended, which nobody will signal again: now
                tg.start_soon(one, invocation_id, gate.enter(self._order.get(invocation_id, (0, 0))))
                gate.dispatch()

        # A store that rings (LMDB) wakes this worker when another process makes something
        # runnable (a message sent with `journal send`), between its polls.
        if Capability.WORK_BELL in self.store.capabilities and Capability.WAKE_ON_WORK not in self.store.capabilities:
            self._bell = self.store.work_bell()
        try:
            async with anyio.create_task_group() as tg:
                if before_look is not None and not idle_exit:
                    tg.start_soon(self._keep_firing, before_look)
                    before_look = None
                while True:
                    if self._paused_until is not None:
                        until = self._paused_until
                        if idle_exit and self._full_since is not None:
                            give_up = self._full_since + disk_full_wait
                            if time.monotonic() >= give_up:
                                raise self._given_up(disk_full_wait)
                            until = min(until, give_up)
                        await anyio.sleep(max(0.0, until - time.monotonic()))  # then a last try
                    settled = anyio.Event()  # set when no turn is left, even if the last ends during the look
                    running_low = anyio.Event()
                    if before_look is not None:
                        await before_look()
                    ids = await self._read(self.runnable)
                    more = not self._took_all
                    found, self.found = self.found, {}
                    for invocation_id in ids:
                        self.active.add(invocation_id)
                        tg.start_soon(one, invocation_id, gate.enter(self._order.get(invocation_id, (0, 0))),
                                      found.get(invocation_id))
                    gate.dispatch()
                    if idle_exit and not ids and not self.active:
                        return
                    # idle_exit: the last turn to end decides at once (no wait for new work to time out)
                    await first_of(self._idle, settled.wait if idle_exit else running_low.wait)
        finally:
            if self._bell is not None:
                self._bell.close()
                self._bell = None

    async def _keep_firing(self, fire: Callable[[], Awaitable[object]]) -> None:
        """Fire due schedules, apart from the looks for work: a tick's invocation is created
        on time however long the runs take, and the runs go on while a tick of thousands of
        schedules is fired (before, each look waited for it: 10,000 schedules on PostgreSQL
        held the look for 86 s). A call with nothing due returns without reading the store."""
        while True:
            if await fire():
                self.nudge()  # (a store that does not wake workers by itself)
            await anyio.sleep(_FIRE_EVERY)

    def _pause(self, exc: DiskFull) -> None:
        """Take no work for a while: the store's disk is full. Each try that finds it still full
        waits twice as long, up to `_PAUSE_MAX` seconds; the first says so (`Observer.paused`)."""
        self._full = exc
        if self._paused_until is None:
            self._pause_for = _PAUSE_FIRST
            self._full_since = time.monotonic()
            self.executor.settings.observers.paused(
                f"{exc}. The invocations stay pending; this worker tries again every few seconds and goes on "
                "once there is room")
        elif time.monotonic() >= self._paused_until:  # a try after the wait: still full
            self._pause_for = min(self._pause_for * 2, _PAUSE_MAX)
        self._paused_until = time.monotonic() + self._pause_for

    def _given_up(self, waited: float) -> DiskFull:
        return DiskFull(errno.ENOSPC, f"{self._full} (waited {waited:g} s for room, then gave up: the "
                        "invocations it could not finish stay pending, with every step they committed)")

    def _went_on(self) -> None:
        self._full_since = None
        if self._paused_until is not None:
            self._paused_until = None
            self.executor.settings.observers.went_on()

    async def _idle(self) -> None:
        """Wait for work: a store that can (PostgreSQL, with a NOTIFY) wakes us when something
        becomes runnable, or when its next timer falls due; any other store is polled."""
        if Capability.WAKE_ON_WORK not in self.store.capabilities:
            # The event stays set until this wait has seen it: a nudge while the worker looked
            # (rather than waited) is not lost.
            nudged = self._nudged = self._nudged or anyio.Event()
            bell = self._bell
            waits: list[Any] = [nudged.wait]
            if bell is not None:
                waits.append(functools.partial(anyio.wait_readable, bell.socket))
            limiter = self.executor.settings.limiter
            if self._in_line and limiter is not None:
                # A unit given back here may let an invocation waiting in a limit's line go now.
                waits.append(limiter.rung)
            with anyio.move_on_after(self.poll_interval):
                await first_of(*waits)
            if nudged.is_set():
                self._nudged = anyio.Event()
            if bell is not None:
                bell.drain()
            return
        wake = await self._read(self.store.next_wake)
        # A worker that dies sends no NOTIFY: its session's end (or its lease's expiry) is seen
        # by looking again, once a second, a few cheap queries when nothing else wakes us.
        timeout = min(1.0, self.executor.settings.lease_ttl / 3)
        if wake is not None:
            timeout = max(0.0, min(timeout, (wake - now_us()) / 1e6))
        await self._read(self.store.wait_for_work, timeout)


class _Gate:
    """A capacity limiter whose waiters go in claim order (highest priority, then oldest),
    not in arrival order: an urgent invocation found after a thousand queued ones in this
    process runs before them. Every invocation a look finds is entered (`enter`) before any
    slot is handed out (`dispatch`), so the order holds whichever task the loop runs first."""

    def __init__(self, capacity: int) -> None:
        self._free = capacity
        self._waiting: list[tuple[tuple[int, int], int, anyio.Event]] = []
        self._count = itertools.count()
        self._gone: set[int] = set()  # tickets cancelled while waiting, still in the heap

    def enter(self, order: tuple[int, int]) -> tuple[tuple[int, int], int, anyio.Event]:
        ticket = (order, next(self._count), anyio.Event())
        heapq.heappush(self._waiting, ticket)
        return ticket

    def dispatch(self) -> None:
        while self._free > 0 and self._waiting:
            ticket = heapq.heappop(self._waiting)
            if ticket[1] in self._gone:
                self._gone.discard(ticket[1])
                continue
            self._free -= 1
            ticket[2].set()

    @contextlib.asynccontextmanager
    async def turn(self, ticket: tuple[tuple[int, int], int, anyio.Event]) -> AsyncIterator[None]:
        try:
            await ticket[2].wait()
        except BaseException:
            if ticket[2].is_set():  # handed the slot as it was cancelled: pass it on
                self._release()
            else:  # left in the heap, passed over by `dispatch`: a removal each would be quadratic
                self._gone.add(ticket[1])
            raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        self._free += 1
        self.dispatch()
