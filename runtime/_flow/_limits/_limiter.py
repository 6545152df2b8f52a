"""Waiting for limits: one `Limiter` per engine takes and gives back units of the store's
limits (`journal/limits/`) for the steps and invocations it runs.

A waiter holds no thread: it is a task asleep until a unit may have freed. Its request is
registered in the store's line for the name, so every process serves the same line in the
same order (priority, then arrival). A unit freed in this process wakes its waiters at once;
one freed elsewhere is seen at the next look, at most `poll` seconds later (longer for a
waiter far back in the line, so a thousand waiters do not all ask every few milliseconds),
and a window or a pause that ends is waited for exactly.
"""

from __future__ import annotations

import functools
import itertools
import os
import secrets
import threading
import time
from collections.abc import Sequence
from typing import Any

import anyio

from journal import HOST, Store
from journal.limits import Blocked, Granted, LimitError, LimitTable, Request, check_name

_LOCAL_POLL = 0.02  # seconds between looks at the line, for the waiter first in it (LMDB)
_REMOTE_POLL = 0.05  # the same on a store on the network
_FARTHEST = 1.0  # a waiter far back in the line looks at least this often (it counts as alive)

# An acquisition on a thread: still running, done, or left by its waiter while it ran.
_RUNNING, _DONE, _LEFT = "running", "done", "left"


# `limit=NAME` as the names it takes, by NAME: a step under a limit does not check its name each time.
_single: dict[str, tuple[str, ...]] = {}

# A hold's id: this process's random prefix, then a count (no random bytes read for each hold).
# A child process forked from this one draws a prefix of its own.
_hold_prefix = secrets.token_hex(8)
_hold_count = itertools.count()


def _new_prefix() -> None:
    global _hold_prefix
    _hold_prefix = secrets.token_hex(8)


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_new_prefix)


def limit_names(limit: str | Sequence[str] | None) -> tuple[str, ...]:
    """`limit=` as the sorted names it takes (one global order: no two holders wait on each other)."""
    if limit is None:
        return ()
    if isinstance(limit, str):
        found = _single.get(limit)
        if found is not None:
            return found
    names = (limit,) if isinstance(limit, str) else tuple(limit)
    for name in names:
        if not isinstance(name, str) or not name:
            raise LimitError(f"limit= takes a limit name or a list of names (non-empty strings), got {limit!r}")
        check_name(name)
    found = tuple(sorted(set(names)))
    if isinstance(limit, str) and len(_single) < 4096:
        _single[limit] = found
    return found


class Limiter:
    """Acquires and releases units of the store's limits for one engine (`owner`)."""

    def __init__(self, store: Store, owner: str) -> None:
        self._store = store
        self._owner = owner
        self._pid = _pid()
        self._table: LimitTable | None = None
        self._bell: anyio.Event | None = None  # rung when a unit is given back here (made by a waiter)

    @property
    def table(self) -> LimitTable:
        if self._table is None:
            self._table = self._store.limits()
        return self._table

    async def _call(self, fn: Any, *args: Any) -> Any:
        if self.table.blocking:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args), abandon_on_cancel=True)
        return fn(*args)

    async def _acquire(self, request: Request) -> Any:
        """One look at the line: from the event loop where the store can, else on a thread."""
        answer = await self.table.acquire_async(request)
        return answer if answer is not None else await self._acquire_on_thread(request)

    async def _acquire_on_thread(self, request: Request) -> Granted | Blocked:
        """`table.acquire(request)` on a thread. A waiter cancelled meanwhile leaves at once, and
        the thread goes on to the end of its transaction, which may grant the unit or put the
        request in line after the waiter gave back what it held (its give-back may even be
        carried in front of that transaction). So the thread, seeing the waiter gone, gives
        back whatever its own transaction took."""
        table = self.table
        lock = threading.Lock()
        state = [_RUNNING]

        def call() -> Granted | Blocked:
            try:
                return table.acquire(request)
            finally:  # (a failed call too: its transaction may have committed before the reply was lost)
                with lock:
                    left = state[0] is _LEFT
                    state[0] = _DONE
                if left:
                    table.release(request.hid, request.names, None, claim=request.claim)

        try:
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except BaseException:
            with lock:
                if state[0] is _RUNNING:
                    state[0] = _LEFT
            raise

    def _ring(self) -> None:
        bell, self._bell = self._bell, None
        if bell is not None:
            bell.set()

    def request(self, names: tuple[str, ...], *, hid: str | None = None, tokens: int = 0, priority: int = 0,
                label: str = "", arrival: int | None = None, claim: int = 0) -> Request:
        return Request(hid or f"{_hold_prefix}{next(_hold_count):x}", names, self._owner, HOST, self._pid, tokens,
                       priority, label, arrival, claim)

    async def acquire(self, names: tuple[str, ...], *, hid: str | None = None, tokens: int = 0, priority: int = 0,
                      label: str = "", arrival: int | None = None, claim: int = 0) -> str:
        """Take a unit of every name (all at once, in line behind earlier and higher waiters);
        the hold's id, for `release`. `claim`: the lease epoch of the invocation's execution
        whose run it is (`Holder.claim`)."""
        request = self.request(names, hid=hid, tokens=tokens, priority=priority, label=label, arrival=arrival,
                               claim=claim)
        answer = self.acquire_now(request)
        if answer is None or isinstance(answer, Blocked):
            await self.wait(request, answer)
        return request.hid

    def acquire_now(self, request: Request) -> Granted | Blocked | None:
        """The uncontended path, without an await: one unsynced transaction where the store's
        calls do not block (Blocked: it stands in line now, `wait` for it); None where they do."""
        table = self._table if self._table is not None else self.table
        return None if table.blocking else table.acquire(request)

    async def wait(self, request: Request, answer: Blocked | None) -> None:
        """Until `request` is granted; `answer` what `acquire_now` said (None: nothing asked yet)."""
        hid, names = request.hid, request.names
        table = self.table
        poll = _REMOTE_POLL if table.blocking else _LOCAL_POLL
        try:
            if answer is None:
                answer = await self._acquire(request)
            while isinstance(answer, Blocked):
                wait = min(_FARTHEST, poll * (1 + answer.ahead))
                if answer.retry_at is not None:
                    wait = min(wait, max(0.0, answer.retry_at / 1e6 - time.time()) + 0.001)
                if self._bell is None:
                    self._bell = anyio.Event()
                with anyio.move_on_after(wait):
                    await self._bell.wait()
                answer = await self._acquire(request)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._release(hid, names, None, request.claim)
                self._ring()  # whoever stood behind it may go now
            raise

    async def rung(self) -> None:
        """Return when a unit is next given back in this process (a worker waiting for work
        looks again at once: an invocation in a limit's line may go now)."""
        if self._bell is None:
            self._bell = anyio.Event()
        await self._bell.wait()

    async def release(self, hid: str, names: tuple[str, ...], used_tokens: int | None = None, *,
                      claim: int | None = None) -> None:
        """Give back `hid`'s units; with `claim`, only if that claim still holds them (`Holder.claim`)."""
        if self.release_now(hid, names, used_tokens, claim=claim):
            return
        with anyio.CancelScope(shield=True):  # a unit is given back even by a cancelled step
            await self._release(hid, names, used_tokens, claim)
        self._ring()

    def release_now(self, hid: str, names: tuple[str, ...], used_tokens: int | None = None, *,
                    claim: int | None = None) -> bool:
        """`release` without an await, where the store's calls do not block (whether it did):
        nothing to cancel on the way."""
        table = self._table if self._table is not None else self.table
        if table.blocking:
            return False
        table.release(hid, names, used_tokens, claim=claim)
        self._ring()
        return True

    async def _release(self, hid: str, names: tuple[str, ...], used_tokens: int | None,
                       claim: int | None = None) -> None:
        if not await self.table.release_async(hid, names, used_tokens, awaited=self._bell is not None, claim=claim):
            await self._call(functools.partial(self.table.release, claim=claim), hid, names, used_tokens)

    async def settle(self) -> None:
        """Until the releases on their way are done (before the store closes)."""
        if self._table is not None:
            with anyio.CancelScope(shield=True):
                await self._table.settle()

    async def pause(self, names: tuple[str, ...], seconds: float) -> list[str]:
        until = int((time.time() + seconds) * 1e6)
        return list(await self._call(self.table.pause, names, until))


def _pid() -> int:
    return os.getpid()
