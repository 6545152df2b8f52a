"""Where a plain (non-async) step function runs: on a thread, so that a blocking call (a
synchronous HTTP client, as most LLM and tool SDKs offer) never holds up the event loop,
the other invocations' steps, or the lease renewals.

A pool of daemon threads, started on demand up to a limit and gone after a while without
work, takes the calls from a queue; a call beyond the limit waits in the queue for a free
thread. The waiting task is woken with one thread-safe call into its event loop. If the
task is cancelled (a step's timeout, a stop from outside), it stops waiting at once: the
function runs on to its end on its thread, and what it returns is dropped (a thread cannot
be stopped; the step then counts as not done, and runs again if it is retried or resumed,
as after a crash). Daemon threads: a process stopping never waits for a blocking call.

The call runs in a copy of the caller's context, so `current_step()` works inside it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

import anyio

DEFAULT_LIMIT = 64  # threads running step functions at once, per process
_IDLE_EXIT = 10.0  # seconds without work before a thread exits


class _Call:
    __slots__ = ("fn", "context", "reply", "failed", "value", "abandoned")

    def __init__(self, fn: Callable[[], Any], context: contextvars.Context,
                 reply: Callable[[_Call], Any]) -> None:
        self.fn = fn
        self.context = context
        self.reply = reply  # called on the step's thread once `fn` has returned or raised
        self.failed = False
        self.value: Any = None
        self.abandoned = False  # the caller stopped waiting: a call not begun is not run


class StepThreads:
    """Runs plain step functions on up to `limit` threads of its own."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"step_threads must be at least 1, got {limit}")
        self.limit = limit
        self._queue: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` as an async function whose calls run on one of these threads."""
        async def threaded(*args: Any, **kwargs: Any) -> Any:
            return await self.run(functools.partial(fn, *args, **kwargs))

        return threaded

    async def run(self, fn: Callable[[], Any]) -> Any:
        """`fn()` on a thread; its result, or its exception raised here."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return await self._run_elsewhere(fn)
        # On asyncio the waiting task awaits a bare future that the thread settles with one
        # call into the loop: half the cost of an anyio.Event per call, which a server
        # running thousands of plain steps a second pays on every one.
        waiter = loop.create_future()
        call = _Call(fn, contextvars.copy_context(),
                     lambda done: loop.call_soon_threadsafe(_settle, waiter, done.failed, done.value))
        self._submit(call)
        try:
            return await waiter
        except BaseException:
            call.abandoned = True
            raise

    async def _run_elsewhere(self, fn: Callable[[], Any]) -> Any:
        """Trio, or an event loop we cannot call into from a thread (anyio's portable path)."""
        try:
            import trio

            token = trio.lowlevel.current_trio_token()
        except (ImportError, RuntimeError):
            return await anyio.to_thread.run_sync(contextvars.copy_context().run, fn, abandon_on_cancel=True)
        event = anyio.Event()
        call = _Call(fn, contextvars.copy_context(), lambda done: token.run_sync_soon(event.set))
        self._submit(call)
        try:
            await event.wait()
        except BaseException:
            call.abandoned = True
            raise
        if call.failed:
            raise call.value
        return call.value

    def _submit(self, call: _Call) -> None:
        with self._lock:
            if self._idle == 0 and self._threads < self.limit:
                threading.Thread(target=self._work, name="journal-step", daemon=True).start()
                self._threads += 1
            else:
                self._idle -= 1  # this call takes an idle thread (or waits for the next free one)
            self._queue.put(call)

    def _work(self) -> None:
        while True:
            try:
                call = self._queue.get(timeout=_IDLE_EXIT)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty() and self._idle > 0:
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            if not call.abandoned:
                try:
                    call.value = call.context.run(call.fn)
                except BaseException as exc:  # handed to the waiting task, which raises it
                    call.failed, call.value = True, exc
                try:
                    call.reply(call)
                except RuntimeError:  # the loop closed while the step ran: nobody is waiting
                    pass
            call.fn = call.context = None  # type: ignore[assignment]  # nothing kept while idle
            with self._lock:
                self._idle += 1


def _settle(waiter: asyncio.Future[Any], failed: bool, value: Any) -> None:
    if waiter.done():  # the waiting task was cancelled meanwhile: what the step returned is dropped
        return
    if failed:
        if isinstance(value, StopIteration):  # a future refuses one; raised in a coroutine it becomes this
            error = RuntimeError("a step function raised StopIteration")
            error.__cause__ = value
            value = error
        waiter.set_exception(value)
    else:
        waiter.set_result(value)


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
