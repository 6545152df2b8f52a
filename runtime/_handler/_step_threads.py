"""Where a plain (non-async) step function runs: on a thread, so that a blocking call (a
synchronous HTTP client, as most LLM and tool SDKs offer) never holds up the event loop,
the other invocations' steps, or the lease renewals.

A pool of daemon threads, started on demand up to a limit and gone after a while without
work, takes the calls from a queue; a call beyond the limit waits in the queue for a free
thread. If the waiting task is cancelled (a step's timeout, a stop from outside), it stops
waiting at once: the function runs on to its end on its thread, and what it returns is
dropped (a thread cannot be stopped; the step then counts as not done, and runs again if
it is retried or resumed, as after a crash). Daemon threads: a process stopping never
waits for a blocking call.

What makes a hand-off cheap (`python -m bench.handoff`; figures in docs/performance.md):
- A call wakes a sleeping thread only when no thread is free to look at the queue; a
  thread taking a call wakes the next one only if work is left behind it. Calls that end
  at once are run one after another by the thread already awake, without a wake-up each;
  a call that blocks has made sure, before it began, that another thread takes the rest.
- On asyncio the calls a turn of the loop submits are handed over together at the end of
  it (one lock, one wake-up; a call from the turn's last callback, a lone step's, goes at
  once); a thread runs on through the queue before it wakes the loop
  for the results, so calls submitted together come back together and their steps'
  commits share one fsync (W2 made twice as many group commits without this).
- Results go back through one mailbox per event loop: one wake-up for a batch, and the
  loop hands every result waiting there to its task.
- On trio the waiting task is parked and rescheduled directly (no event object).
- On asyncio, a call made when the loop has nothing else to run (no callback ready, no
  call queued ahead of it), while the step functions' recent calls returned at once, is
  waited for on the loop's own thread, for at most half a millisecond: the thread hands the
  result over through a lock, and the loop goes on without a wake-up through its selector,
  a callback and a turn of its own (W1 with a plain step: 8-24% less time a step, figures in
  docs/performance.md). The loop holds only when nothing else was ready to run, and half a
  millisecond at most; a call still running then goes on as any other, and a slow call (an
  LLM's) makes the next ones wait the usual way until quick calls come again.
- The thread woken for such a call wakes on the loop's CPU (`_thread_cpus.py`): the loop's
  thread sleeps on the lock while the call runs, so the two hand-overs are switches on one
  CPU instead of wake-ups of an idle one (65 -> 8.5-12 µs on a virtual machine).

The call runs in a copy of the caller's context, so `current_step()` works inside it.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import inspect
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import anyio

from ._thread_cpus import ThreadPins

DEFAULT_LIMIT = 64  # threads running step functions at once, per process
_IDLE_EXIT = 10.0  # seconds without work before a thread exits
# The loop waits on its own thread for a call (see the module doc) while the step functions'
# recent calls took less than this, and for at most `_HELD_WAIT` seconds.
_HELD_BELOW = 0.0002
_HELD_WAIT = 0.0005


class _Call:
    __slots__ = ("fn", "context", "mailbox", "waiter", "failed", "value", "abandoned", "held")

    def __init__(self, fn: Callable[[], Any], context: contextvars.Context, mailbox: _Mailbox, waiter: Any) -> None:
        self.fn = fn
        self.context = context
        self.mailbox = mailbox  # where the result goes once `fn` has returned or raised
        self.waiter = waiter  # what the loop settles: an asyncio future, or a parked trio task
        self.failed = False
        self.value: Any = None
        self.abandoned = False  # the caller stopped waiting: a call not begun is not run
        self.held: threading.Lock | None = None  # released for the loop's thread, which waits on it (`_held`)


class _Mailbox:
    """Finished calls on their way back to one event loop: put in `done` by the step
    threads, then announced once for a batch, which wakes the loop; the loop takes every
    call waiting by then."""

    __slots__ = ("done", "woken", "wake", "settle")

    def __init__(self, wake: Callable[[Callable[[], None]], Any], settle: Callable[[_Call], None]) -> None:
        self.done: collections.deque[_Call] = collections.deque()
        self.woken = False  # a wake-up is on its way: later results ride along
        # The loop's thread-safe "call this soon", held weakly: the mailboxes are kept by
        # their loop (a weak key), which this must not keep alive once its run is over.
        self.wake = weakref.WeakMethod(wake)
        self.settle = settle

    def announce(self) -> None:  # on a step thread, once results are in `done`
        if not self.woken:  # (two threads may both wake it: a second drain finds nothing, harmless)
            self.woken = True
            wake = self.wake()
            if wake is None:  # the loop is gone: nobody is waiting
                return
            try:
                wake(self.drain)
            except RuntimeError:  # the loop closed while the step ran: nobody is waiting
                pass

    def drain(self) -> None:  # on the loop
        # Cleared before taking: a result put after this is either taken below or wakes the loop again.
        self.woken = False
        done, settle = self.done, self.settle
        while done:
            call = done.popleft()
            settle(call)


# One mailbox per running event loop (asyncio loop, or trio run by its token).
_mailboxes: weakref.WeakKeyDictionary[Any, _Mailbox] = weakref.WeakKeyDictionary()
_mailboxes_lock = threading.Lock()


def _asyncio_mailbox(loop: asyncio.AbstractEventLoop) -> _Mailbox:
    try:
        return _mailboxes[loop]
    except KeyError:
        with _mailboxes_lock:
            return _mailboxes.setdefault(loop, _Mailbox(loop.call_soon_threadsafe, _settle_future))


class StepThreads:
    """Runs plain step functions on up to `limit` threads of its own."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"step_threads must be at least 1, got {limit}")
        self.limit = limit
        self._pins = ThreadPins()  # threads woken on the loop's CPU for a call the loop waits for
        self._start_empty()
        _pools.add(self)
        # Seconds the step functions' recent calls took: a slow one counts in full at once, and
        # quick ones bring it down a tenth of the way each (as the fsyncs' in `commit/_flusher.py`).
        self.recent = 0.0

    def _start_empty(self) -> None:
        """No thread, no call (also in a child after `fork`, where the parent's threads are not)."""
        self._lock = threading.Lock()
        self._pending: collections.deque[_Call] = collections.deque()  # calls no thread has taken yet
        self._sleepers: list[threading.Lock] = []  # idle threads, each waiting on its own lock
        self._tids: dict[threading.Lock, int] = {}  # a thread's lock -> its native id
        self._pins.reset()
        self._threads = 0
        self._free = 0  # threads awake and not in a call: each looks at the queue before it sleeps
        # Mailboxes holding results whose loop has not been woken for them yet (see `_work`).
        self._unannounced: dict[_Mailbox, None] = {}
        self._outgoing: weakref.WeakKeyDictionary[Any, list[_Call]] = weakref.WeakKeyDictionary()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` as an async function whose calls run on one of these threads."""
        async def threaded(*args: Any, **kwargs: Any) -> Any:
            return await self.run(functools.partial(fn, *args, **kwargs) if args or kwargs else fn)

        return threaded

    async def run(self, fn: Callable[[], Any]) -> Any:
        """`fn()` on a thread; its result, or its exception raised here."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return await self._run_elsewhere(fn)
        if (self.recent < _HELD_BELOW and not getattr(loop, "_ready", True) and not self._pending
                and (self._free or self._sleepers)):  # (read without the lock: a guess, either way safe)
            call = _Call(fn, contextvars.copy_context(), _asyncio_mailbox(loop), None)
            if self._held(call, loop):
                # A turn of the loop all the same: a handler making quick steps one after
                # another leaves the loop's other work (lease renewals) its turns between them.
                await asyncio.sleep(0)
                if call.failed:
                    raise _raisable(call.value)
                return call.value
            try:  # still running: its result comes through the mailbox, as any other's
                return await call.waiter
            except BaseException:
                call.abandoned = True
                raise
        # The waiting task awaits a bare future that the loop settles from the mailbox.
        waiter = loop.create_future()
        call = _Call(fn, contextvars.copy_context(), _asyncio_mailbox(loop), waiter)
        # Handed to the threads at the end of this turn of the loop, with the others made in it.
        outgoing = self._outgoing.get(loop)
        if outgoing is None:
            self._outgoing[loop] = outgoing = []
        if outgoing:
            outgoing.append(call)
        elif getattr(loop, "_ready", True):  # more callbacks in this turn: they may submit too
            outgoing.append(call)
            loop.call_soon(self._send, outgoing)
        else:  # the last callback of the turn (a lone step): no turn of the loop spent waiting
            self._submit(call)
        try:
            return await waiter
        except BaseException:
            call.abandoned = True
            raise

    def _held(self, call: _Call, loop: asyncio.AbstractEventLoop) -> bool:
        """Run `call` on a thread while the loop's thread waits for it, up to `_HELD_WAIT`:
        True once it has returned or raised; False if it is still running, its result then
        to come through the mailbox to `call.waiter`."""
        held = call.held = threading.Lock()
        held.acquire()
        self._enqueue((call,), pin=True)
        if held.acquire(timeout=_HELD_WAIT):
            return True
        with self._lock:  # the thread looks at `held` under the lock too: one of the two ways is taken
            if call.held is not None:
                call.held = None
                call.waiter = loop.create_future()
                return False
        held.acquire()  # released between the timeout and the lock: the result is there
        return True

    async def _run_elsewhere(self, fn: Callable[[], Any]) -> Any:
        """Trio, or an event loop we cannot call into from a thread (anyio's portable path)."""
        try:
            import trio

            token = trio.lowlevel.current_trio_token()
        except (ImportError, RuntimeError):
            return await anyio.to_thread.run_sync(contextvars.copy_context().run, fn, abandon_on_cancel=True)
        mailbox = _mailboxes.get(token)
        if mailbox is None:
            with _mailboxes_lock:
                mailbox = _mailboxes.setdefault(token, _Mailbox(token.run_sync_soon, _reschedule_task))
        call = _Call(fn, contextvars.copy_context(), mailbox, trio.lowlevel.current_task())
        self._submit(call)

        def abort(_: Any) -> Any:  # cancelled while parked: the result, when it comes, is dropped
            call.abandoned = True
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    def _send(self, outgoing: list[_Call]) -> None:  # on the loop
        self._enqueue(outgoing)
        outgoing.clear()

    def _submit(self, call: _Call) -> None:
        self._enqueue((call,))

    def _enqueue(self, calls: list[_Call] | tuple[_Call, ...], pin: bool = False) -> None:
        with self._lock:
            self._pending.extend(calls)
            if self._free == 0:  # every thread is in a call (perhaps a blocking one), or asleep
                self._wake_one(pin)

    def _wake_one(self, pin: bool = False) -> None:
        """A sleeping thread woken, or a new one started, to look at the queue (under the lock);
        `pin`: the caller's thread waits for the call, and the thread woken runs on its CPU."""
        if self._sleepers:
            wake = self._sleepers.pop()  # the most recent: the others may time out and exit
            try:
                if pin:
                    self._pins.pin(self._tids[wake])
            finally:
                wake.release()
        elif self._threads < self.limit:
            threading.Thread(target=self._work, name="journal-step", daemon=True).start()
            self._threads += 1
        else:
            return  # every thread busy: the first to finish takes the call
        self._free += 1

    def _work(self) -> None:
        # A finished call's result waits in its mailbox, unannounced, while this thread goes
        # straight on to the next queued call: the results of calls submitted together go
        # back together, so their steps' commits share one fsync again (W2 made twice as
        # many group commits when the first result of a round woke the loop on its own).
        # The results are announced (the loop woken) once the queue is empty, and before
        # taking a call when no other thread is free to announce them: a call that blocks
        # never holds back results that came before it.
        wake = threading.Lock()
        wake.acquire()
        tid = threading.get_native_id()
        pending, lock, unannounced, pinned = self._pending, self._lock, self._unannounced, self._pins.pinned
        with lock:
            self._tids[wake] = tid
        finished: _Mailbox | None = None  # back from a call: free again, its result in this mailbox
        while True:
            with lock:
                if finished is not None:
                    self._free += 1
                    unannounced[finished] = None
                if pending:
                    call = pending.popleft()
                    self._free -= 1
                    if pending and self._free == 0:  # this call may block: another thread takes the rest
                        self._wake_one()
                    announce = not pending or self._free == 0
                else:
                    call = None
                    self._free -= 1
                    self._sleepers.append(wake)
                    announce = True
                if announce and unannounced:
                    mailboxes = list(unannounced)
                    unannounced.clear()
                else:
                    mailboxes = None
            if mailboxes is not None:
                for mailbox in mailboxes:
                    mailbox.announce()
            if call is None:
                if not wake.acquire(timeout=_IDLE_EXIT):
                    with lock:
                        if wake in self._sleepers:  # not woken meanwhile: this thread exits
                            self._sleepers.remove(wake)
                            del self._tids[wake]
                            self._pins.forget(tid)
                            self._threads -= 1
                            return
                    wake.acquire()  # woken just as the wait ran out: the release is there already
                if tid in pinned:  # the pin chose where it woke; what it runs may use its every CPU
                    self._pins.unpin(tid)
                finished = None  # (woken: counted free by whoever woke it)
                continue
            finished = call.mailbox
            if call.abandoned:  # the caller stopped waiting before the call began: not run
                finished = None
                with lock:
                    self._free += 1
                continue
            began = time.perf_counter()
            try:
                call.value = call.context.run(call.fn)
            except BaseException as exc:  # handed to the waiting task, which raises it
                call.failed, call.value = True, exc
            took = time.perf_counter() - began
            self.recent = max(took, 0.9 * self.recent + 0.1 * took)
            call.fn = call.context = None  # type: ignore[assignment]  # nothing kept once run
            if call.held is not None:
                with lock:
                    held, call.held = call.held, None
                    if held is not None:
                        self._free += 1
                if held is not None:  # the loop's thread waits for it: no mailbox, no wake-up of the loop
                    finished = None
                    held.release()
                    del call
                    continue
            finished.done.append(call)
            del call


_pools: weakref.WeakSet[StepThreads] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Only the thread that forked goes on in the child: the pools' threads, their locks'
    # holders and their ids are the parent's (pinning one would move the parent's thread).
    global _mailboxes_lock
    _mailboxes_lock = threading.Lock()
    _mailboxes.clear()
    for pool in list(_pools):
        pool._start_empty()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _settle_future(call: _Call) -> None:
    _settle(call.waiter, call.failed, call.value)


def _reschedule_task(call: _Call) -> None:
    if call.abandoned:  # the task was cancelled while its call ran
        return
    import outcome
    import trio

    trio.lowlevel.reschedule(call.waiter, outcome.Error(call.value) if call.failed else outcome.Value(call.value))


def _settle(waiter: asyncio.Future[Any], failed: bool, value: Any) -> None:
    if waiter.done():  # the waiting task was cancelled meanwhile: what the step returned is dropped
        return
    if failed:
        waiter.set_exception(_raisable(value))
    else:
        waiter.set_result(value)


def _raisable(error: BaseException) -> BaseException:
    if isinstance(error, StopIteration):  # a future refuses one; raised in a coroutine it becomes this
        wrapped = RuntimeError("a step function raised StopIteration")
        wrapped.__cause__ = error
        return wrapped
    return error


# Functions known to be async (their call returns a coroutine at once): weak keys, since
# handlers often pass fresh lambdas.
_async: weakref.WeakKeyDictionary[Callable[..., Any], bool] = weakref.WeakKeyDictionary()


def runs_on_loop(fn: Callable[..., Any]) -> bool:
    """Whether a step function runs on the event loop: an `async def` (or a callable whose
    `__call__` is one); any other runs on a thread unless the step says `inline=True`."""
    try:
        return _async[fn]
    except (KeyError, TypeError):
        pass
    # A callable object's coroutine `__call__` (its type's: `fn` is callable, so it has one).
    found = inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__))
    try:
        _async[fn] = found
    except TypeError:  # not weakly referenceable (a builtin): asked each time
        pass
    return found
