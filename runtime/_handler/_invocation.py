"""The live `Context`: a thin async shell around the invocation state machine.

Each context call claims its operation from the `Machine` (runtime/_replay/_machine.py), which
decides at once whether it replays a recorded entry, runs live or diverged, and does
the I/O that follows: running the step's function, writing its entry, waiting for a
timer or a promise, suspending.
"""

from __future__ import annotations

import datetime
import inspect
import random as _random
import threading
import time
import uuid as _uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from journal import (
    NIL,
    Append,
    CancelReceived,
    Committer,
    Durability,
    Emitted,
    Now,
    Patched,
    Promise,
    Sleep,
    Step,
    Tagged,
    Talk,
    Transition,
    UnencodableValue,
    check_tag,
    encode_value,
    from_us,
    now_us,
)
from journal.errors import JournalError, LeaseLost, StoreError

from .._base._step_info import PLAIN, Running, _current
from .._replay._machine import EndOfJournal, Machine
from .._replay._replayer import R, Replayer
from .._replay._suspend import Restart, Suspend
from ..errors import PromiseRejected, StepTimeout, TerminalError
from ._composition import Composition, _fence
from ._context import Context
from ._handlers import type_text
from ._promise_types import decode_promise_value, is_validation_error, promise_type
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._state import State
from ._step_threads import StepThreads, runs_on_loop
from ._steps import (
    attempts,
    check_step,
    idempotency_key,
    rebuild_error,
    replayed_result,
    return_type,
    step_digest,
    step_entry,
)
from ._talk import Talking

if TYPE_CHECKING:
    from ._chunks import Emitter

__all__ = ["InvocationContext", "idempotency_key"]


_EMITTERS_MADE = threading.Lock()
# For a context made without an engine's threads (replay in tests, which runs no step).
_PROCESS_THREADS = StepThreads()


def _limits() -> tuple[Callable[..., tuple[str, ...]], Callable[..., Callable[..., Any]]]:
    """`limit_names` and `limited`, imported on first use (flow control imports this package)
    and then kept: a step under a limit pays for no import statement."""
    global _LIMITS
    if _LIMITS is None:
        from .._flow._limits._limiter import limit_names
        from .._flow._limits._step import limited

        _LIMITS = (limit_names, limited)
    return _LIMITS


_LIMITS: tuple[Callable[..., tuple[str, ...]], Callable[..., Callable[..., Any]]] | None = None


class InvocationContext(Composition, Talking, Context):
    """One execution's context: its state machine, its lease epoch and the committer."""

    def __init__(
        self,
        *,
        invocation_id: str,
        replayer: Replayer,
        committer: Committer,
        epoch: int,
        max_entry_bytes: int,
        inline_sleep_limit: float,
        always_replay: bool = False,
        key: str | None = None,
        spawner: Any = None,
        replay_only: bool = False,
        threads: StepThreads | None = None,
        key_id: str | None = None,
    ) -> None:
        self._id = invocation_id
        # The id its steps' idempotency keys begin with: a retry keeps the one it retries.
        self.key_id = key_id or invocation_id
        self.machine = Machine(invocation_id, replayer, max_entry_bytes, replay_only=replay_only)
        self._committer = committer
        self._store = committer.store
        self._epoch = epoch
        self._inline_sleep_limit = inline_sleep_limit
        self._always_replay = always_replay
        self._restarting = False
        self._exit_mode = committer.durability is Durability.EXIT
        self._commit_inline = committer.commits_inline
        self._key = key
        self._spawner = spawner  # the engine: starts and runs child invocations
        self._threads = threads or _PROCESS_THREADS  # where plain step functions run
        self.state = State(self, key)
        self._inflight = 0  # steps and timers in flight
        self._wake: anyio.Event | None = None  # made by the first wait (most executions never wait)
        self._quiescing: anyio.Event | None = None
        # Told (name, how, seconds) as each step finishes, when an observer listens (runtime/hooks.py).
        self.on_step: Callable[[str, str, float], None] | None = None
        # Wraps each live step function (an observer's, runtime/hooks.py); None costs one test per step.
        self.wrap_step: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
        self._emitter: Emitter | None = None  # made by the first chunk a step emits (`emit_chunk`)
        self.limiter: Any = None  # the engine's `runtime/_flow/_limits/_limiter.py::Limiter` (steps under `limit=`)
        self.priority = 0  # the invocation's, for its place in a limit's line
        self.budgets: Any = None  # the engine's `runtime/_flow/_limits/_budget.py::Budgets` (looked at before live steps)
        self.budget_scopes: tuple[str, ...] = ()  # what budgets may cover it: handler:, key:, tag:, its limits

    # -- identity and sync operations -----------------------------------------------------

    @property
    def invocation_id(self) -> str:
        return self._id

    def random(self) -> _random.Random:
        return self.machine.random()

    def uuid(self) -> _uuid.UUID:
        return self.machine.uuid()

    def now(self) -> datetime.datetime:
        seq, prev, recorded = self.machine.claim(Now)
        if recorded is not None:
            return from_us(recorded.at)
        self._deliver_cancel_sync(seq, prev)
        at = now_us()
        self.machine.buffer(seq, Now(at, prev))
        return from_us(at)

    def patched(self, change_id: str) -> bool:
        answer = self.machine.patched(change_id)
        if answer is True or answer is False:
            return answer
        seq, prev = answer
        self.machine.buffer(seq, Patched(change_id, now_us(), prev))
        return True

    # -- durable operations ----------------------------------------------------------------

    async def run(  # type: ignore[override]  # accepts every call Context.run's overloads describe
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        type: Any = None,
        timeout: float | None = None,
        inline: bool = False,
        limit: str | Sequence[str] | None = None,
        tokens: int | None = None,
        **kwargs: Any,
    ) -> Any:
        if self._committer.turn_due():  # about once a millisecond (`Committer.turn`)
            await self._committer.turn()
        check_step(name, fn)
        rtype = type if type is not None else return_type(fn)
        call_digest = step_digest(name, args, kwargs)
        machine = self.machine
        if _fence.get() is None and not machine.replay_only:
            seq, prev, recorded = machine.claim(Step, name, call_digest)
        else:
            seq, prev, recorded = await self._claim(Step, name, call_digest)
        if recorded is not None:
            self._report(name, "replayed", 0.0)
            return replayed_result(machine.replayer, seq, name, recorded, rtype)
        # A step pays no coroutine call for what does not apply (the hot path of every live step).
        if machine.cancel_reason is not None or machine.pending or self._restarting:
            await self._before_side_effect(seq, prev)
        if not inline and not runs_on_loop(fn):  # a plain function may block: it runs on a thread
            fn = self._threads.wrap(fn)
        if limit is not None:  # acquired around each attempt, after the replay check: a replayed step takes nothing
            fn = self._limited(name, fn, limit, tokens)
        budgets = self.budgets
        if budgets is not None and (budgets.any or time.monotonic() >= budgets.reread_at):  # after the replay check too
            fn = await self._budgeted(seq, fn, limit)
        if self.wrap_step is not None:
            fn = self.wrap_step(fn)
        started = time.perf_counter() if self.on_step is not None else 0.0
        self._inflight += 1
        try:
            # The key is built from the branch's position, not the seq: after a crash,
            # concurrent branches may be handed other seqs, but each step keeps its key.
            step: Running = (self._id, seq, name, 1, machine.token(), self)  # the position the claim moved to
            if timeout is None and retry is None:
                # The hot path: one attempt, no deadline, and no coroutine call on the way, which
                # is `attempts`'s first round written out (a failure goes on to its retries):
                # W1 async paid 7-15% more per step through `attempts` (docs/performance.md).
                published = _current.set(step)
                raised: Exception | None = None
                try:
                    value = fn(*args, **kwargs)
                    if value.__class__ not in PLAIN and inspect.isawaitable(value):  # (`type` is a parameter)
                        value = await value
                except Exception as exc:
                    raised = exc
                finally:
                    _current.reset(published)
                failure, attempt, cause = None, 1, None
                if raised is not None:  # outside the `except`: later attempts must not see it in flight
                    value, failure, attempt, cause = await attempts(step, fn, args, kwargs, DEFAULT_RETRY, None, raised)
            else:
                value, failure, attempt, cause = await attempts(step, fn, args, kwargs, retry or DEFAULT_RETRY, timeout)
            entry, result = step_entry(name, call_digest, seq, prev, value, failure, attempt, rtype)
            error = entry.error
            emitter = self._emitter
            if emitter is not None and seq in emitter.streaming:  # its live output goes out before its entry
                await self._committer.read(emitter.flush)
            # A step that ran and failed is journaled like one that returned, so replay
            # raises the error again without running the step, and the journal has no gap.
            # The entry (with the encoded value) is not kept across the wait for the commit:
            # thousands of invocations in flight each hold one there.
            commit = self._commit(seq, entry)
            del entry, value
            try:
                await commit
            finally:
                if emitter is not None and seq in emitter.streaming:
                    emitter.ended(seq)
            if self.on_step is not None and (failure is not None or error is None):
                self._report(name, "live" if failure is None else "failed", time.perf_counter() - started)
            if error is not None:
                # Chained to what the step function raised: a failure's traceback shows its frames too.
                raise rebuild_error(error) from cause
        finally:
            self._done_one()
        if self._always_replay and self._inflight == 0 and not self._exit_mode:
            self._restarting = True  # siblings reach their next await before the cancellation does
            raise Restart()
        return result

    def _limited(self, name: str, fn: Callable[..., Any], limit: str | Sequence[str], tokens: int | None,
                 ) -> Callable[..., Any]:
        limit_names, limited = _limits()
        names = limit_names(limit)
        if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0):
            raise TypeError(f"ctx.run({name!r}, ..., tokens=...) takes the step's token estimate (an int, 0 or "
                            f"more), got {tokens!r}")
        if self.limiter is None:
            raise TypeError(f"ctx.run({name!r}, ..., limit=...) needs an engine's context; this one has no limits")
        return limited(fn, self.limiter, names, tokens or 0, self._id, self.priority)

    async def _budgeted(self, seq: int, fn: Callable[..., Any], limit: str | Sequence[str] | None,
                        ) -> Callable[..., Any]:
        """`fn` charged to the budgets covering the step, once none of them is spent; a spent one
        suspends the invocation on its promise `budget:SCOPE` instead (runtime/_flow/_limits/_budget.py)."""
        from .._flow._limits._budget import BudgetIncrease, BudgetRejected, Budgets, BudgetSpent
        from .._flow._limits._limiter import limit_names

        budgets: Budgets = self.budgets
        await budgets.rules()
        covering = budgets.covering(self.budget_scopes + limit_names(limit))
        if not covering:
            return fn
        try:
            await budgets.gate(self._id, covering, self._resolution)
        except BudgetSpent as spent:
            await self._quiesce()
            await self._flush_pending()
            typed = promise_type(spent.promise, BudgetIncrease)
            raise Suspend(waiting=spent.promise, types=(typed,) if typed is not None else ()) from None
        except BudgetRejected as exc:
            raise TerminalError(str(exc)) from None
        return budgets.charged(fn, self._id, seq, covering)

    async def _resolution(self, name: str) -> Any:
        return await self._committer.read(self._store.resolution, self._id, name)

    async def sleep(self, seconds: float) -> None:
        seq, prev, recorded = await self._claim(Sleep)
        # The timer counts as in flight: a sibling branch that must suspend (an unresolved
        # promise in ctx.select or gather) waits for it instead of cancelling it.
        self._inflight += 1
        try:
            await self._sleep(seq, prev, recorded, seconds)
        finally:
            self._done_one()

    async def _sleep(self, seq: int, prev: int, recorded: Any, seconds: float) -> None:
        machine = self.machine
        if recorded is not None:
            until = recorded.until
            nxt = machine.replayer.recorded(seq + 1)
            # Cancellation cut this sleep short when recorded only if it came before the timer
            # was due; a later one was delivered at the branch's next operation.
            if isinstance(nxt, CancelReceived) and nxt.at < until:
                await self._claim(CancelReceived)
            if machine.went_on():
                # The journal shows the timer ended: its branch made another operation after
                # it. The clock is not asked (it may differ from the recording host's).
                return
        else:
            await self._deliver_cancel(seq, prev)
            at = now_us()
            until = at + int(max(seconds, 0) * 1e6)
            await self._commit(seq, Sleep(at, until, prev))
        now = now_us()
        action = machine.timer_wait(until, now, self._inline_sleep_limit)
        if action == "due":
            return
        if action == "suspend":
            await self._quiesce(own=1)
            raise Suspend(wake_at=until)
        with anyio.move_on_after((until - now) / 1e6):  # the durable timer itself, or a cancel request
            await self._waker().wait()
        machine.raise_if_stopped()
        if machine.cancel_due:
            seq, prev, _ = await self._claim(CancelReceived)
            await self._deliver_cancel(seq, prev, at=min(now_us(), until - 1))

    async def promise(self, name: str, *, type: Any = None, timeout: float | None = None) -> Any:
        if not isinstance(name, str) or not name:
            raise TypeError(f"ctx.promise needs a name (a non-empty string), got {name!r}")
        deadline = None
        if timeout is not None:  # the deadline is a durable timer of its own
            dseq, dprev, timer = await self._claim(Sleep)
            if timer is None:
                at = now_us()
                timer = Sleep(at, at + int(max(timeout, 0) * 1e6), dprev)
                await self._commit(dseq, timer)
            deadline = timer.until
        seq, prev, recorded = await self._claim(Promise, name)
        if recorded is None:
            await self._deliver_cancel(seq, prev)
            await self._quiesce()
            resolution = await self._await_resolution(name, deadline)
            action = self.machine.promise_wait(resolution is not None, deadline, now_us())
            if action == "suspend":
                await self._flush_pending()
                typed = promise_type(name, type)
                raise Suspend(waiting=name, wake_at=deadline, types=(typed,) if typed is not None else ())
            if action == "timed out":
                recorded = Promise(name, now_us(), NIL, "timed out", prev, timed_out=True)
            else:
                recorded = Promise(name, now_us(), resolution.value, resolution.error, prev)
            await self._commit(seq, recorded)
        if recorded.timed_out:
            raise StepTimeout(f"promise {name!r} of invocation {self._id!r} was not resolved within {timeout} s")
        if recorded.error is not None:
            rejected = PromiseRejected(f"promise {name!r} of invocation {self._id!r} was rejected: {recorded.error}")
            rejected.reason = recorded.error
            raise rejected
        try:
            return decode_promise_value(recorded.value, type)
        except Exception as exc:
            if not is_validation_error(exc):
                raise
            raise TerminalError(
                f"promise {name!r} of invocation {self._id!r} (seq {seq}) was resolved with a value that does not "
                f"fit type={type_text(type)}: {exc}; resolve it with a matching value"
            ) from None

    async def _await_resolution(self, name: str, deadline: int | None) -> Any:
        """The promise's resolution; a deadline near enough is waited for here instead of suspending."""
        resolution = await self._committer.read(self._store.resolution, self._id, name)
        while resolution is None and deadline is not None:
            left = (deadline - now_us()) / 1e6
            if left <= 0 or left > self._inline_sleep_limit:
                break
            # Another process resolves it through the store, which has no notifications:
            # look again every 50 ms until the deadline (this waits for a promise, it
            # decides nothing about replay).
            with anyio.move_on_after(min(left, 0.05)):
                await self._waker().wait()
            self.machine.raise_if_stopped()
            if self.machine.cancel_reason is not None:
                break
            resolution = await self._committer.read(self._store.resolution, self._id, name)
        return resolution

    async def emit(self, event: Any) -> None:
        seq, prev, recorded = await self._claim(Emitted)
        if recorded is not None:
            return
        await self._deliver_cancel(seq, prev)
        try:
            raw = encode_value(event)
        except UnencodableValue as exc:
            raise TerminalError(f"ctx.emit at seq {seq}: {exc}") from None
        await self._commit(seq, Emitted(now_us(), raw, prev))

    async def tag(self, key: str, value: str) -> None:
        try:
            key, value = check_tag(key, value)
        except JournalError as exc:
            raise TerminalError(f"ctx.tag: {exc}") from None
        seq, prev, recorded = await self._claim(Tagged, key)
        if recorded is not None:
            return  # replay: the record has it since the entry was written
        await self._deliver_cancel(seq, prev)
        self.machine.pending_tags.append((key, value))
        await self._commit(seq, Tagged(key, now_us(), value, prev))

    def emit_chunk(self, seq: int, attempt: int, data: object) -> None:
        """`current_step().emit(data)` in step `seq`: live output, never journaled (runtime/_handler/_chunks.py)."""
        if self._emitter is None:
            if self.machine.replay_only:
                return  # checking a journal runs no step: nothing to stream (and nowhere to)
            from ._chunks import Emitter  # (a run that streams nothing never imports it)

            with _EMITTERS_MADE:  # plain steps emit from their threads: two may be first at once
                if self._emitter is None:
                    self._emitter = Emitter(self._store, self._id, self._epoch)
        self._emitter.emit(seq, attempt, data)

    # -- engine side -----------------------------------------------------------------------

    def stop(self, error: Exception) -> None:
        """Stop the handler at its next context call with `error`; a wait in progress wakes for it."""
        self.machine.stop(error)
        if self._wake is not None:
            self._wake.set()

    def request_cancel(self, reason: str) -> None:
        if self.machine.request_cancel(reason) and self._wake is not None:
            self._wake.set()

    def _waker(self) -> anyio.Event:
        """The event a wait wakes on when a cancel or a stop is requested from outside; one
        requested before the first wait made it is already set."""
        if self._wake is None:
            self._wake = anyio.Event()
            machine = self.machine
            if machine.lost is not None or machine.broken is not None or machine.cancel_reason is not None:
                self._wake.set()
        return self._wake

    async def finish(self, entry: Any | None, transition: Transition) -> Any:
        """Commit the final entry (if any), everything buffered, and the status change, at once,
        and wait for the answer to the end, cancelled meanwhile or not (`Committer.submit`)."""
        entries, state, seen = self.machine.take_final(entry)
        return await self._committer.submit(Append(self._id, self._epoch, entries, transition, state, seen,
                                                   self.machine.take_talk(), self.machine.take_tags()),
                                            durable=True, settle=True)

    # -- internals -------------------------------------------------------------------------

    async def _claim(self, kind: type[R], name: str | None = None, call_digest: int | None = None) -> tuple[int, int, R | None]:
        """Claim this operation from the machine: `(seq, prev, recorded entry or None to run live)`."""
        try:
            found = self.machine.claim(kind, name, call_digest)
        except EndOfJournal:
            await self._park()  # replay-only: this branch would run live from here; it stops
        fence = _fence.get()
        if found[2] is None and fence is not None:
            # A branch that lost a replayed select stops where its recorded path ends.
            fence.parked.set()
            await self._park()
        return found

    async def _before_side_effect(self, seq: int, prev: int) -> None:
        """Before a live step runs: a cancel is delivered, what it may depend on is durable,
        and in always-replay mode no side effect starts once a sibling's step ended the round."""
        if self.machine.cancel_reason is not None:
            await self._deliver_cancel(seq, prev)
        if self.machine.pending:
            await self._flush_pending()
        if self._restarting:
            raise Restart()

    async def _park(self) -> None:
        """Stop the calling branch until it is cancelled (counted by the machine meanwhile)."""
        self.machine.park(True)
        try:
            await anyio.sleep_forever()
        finally:
            self.machine.park(False)

    def _deliver_cancel_sync(self, seq: int, prev: int) -> None:
        if self.machine.cancel_due:
            self.machine.buffer(seq, self.machine.cancel_entry(prev))
            self.machine.raise_cancelled(seq)

    async def _deliver_cancel(self, seq: int, prev: int, at: int | None = None) -> None:
        if self.machine.cancel_due:
            await self._commit(seq, self.machine.cancel_entry(prev, at))
            self.machine.raise_cancelled(seq)

    def _done_one(self) -> None:
        self._inflight -= 1
        if self._quiescing is not None:
            self._quiescing.set()

    async def _quiesce(self, own: int = 0) -> None:
        """Before the handler unwinds to wait: let sibling branches start, and let the steps
        and timers in flight (other than the caller's `own`) finish and journal."""
        await anyio.lowlevel.checkpoint()
        while self._inflight > own:
            if self._quiescing is None or self._quiescing.is_set():
                self._quiescing = anyio.Event()  # set by the next operation that finishes
            await self._quiescing.wait()

    async def _flush_pending(self) -> None:
        if self.machine.pending and not self._exit_mode:
            await self._commit(0, None)

    async def _commit(self, seq: int, entry: Any, talk: Talk | None = None) -> None:
        """Journal `entry` at `seq`, with the entries synchronous operations left pending
        before it (with `entry` None, only those), and with `talk`: what the entry changes
        beside the journal (runtime/_handler/_talk.py), in the same transaction."""
        machine = self.machine
        if self._exit_mode:
            if entry is not None:
                machine.buffer(seq, entry)
            if talk is not None:
                machine.buffer_talk(talk)
            return
        entries, state, seen = machine.take_writes(seq, entry)
        entry = None  # encoded in `entries` now (see `run`)
        op = Append(self._id, self._epoch, entries, None, state, seen, talk, machine.take_tags())
        try:
            if self._commit_inline:  # `async` durability: nothing to wait for, so no coroutine
                self._committer.commit_now(op)
            else:
                await self._committer.submit(op)
        except LeaseLost as exc:
            machine.lost = exc
            raise
        except StoreError as exc:
            machine.broken = exc
            raise

    def _report(self, name: str, how: str, seconds: float) -> None:
        if self.on_step is not None:
            self.on_step(name, how, seconds)
