"""The live `Context`: replays recorded operations, runs the rest and journals them."""

from __future__ import annotations

import datetime
import hashlib
import inspect
import itertools
import random as _random
import time
import typing
import uuid as _uuid
import weakref
from contextvars import ContextVar
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import anyio
import anyio.lowlevel
import msgspec

from journal import (
    NIL,
    Append,
    CancelReceived,
    Committer,
    Durability,
    Emitted,
    ErrorInfo,
    Now,
    Patched,
    Promise,
    Sleep,
    Step,
    Transition,
    UnencodableValue,
    decode_value,
    digest,
    encode_entry,
    encode_value,
)
from journal.errors import LeaseLost, StoreError

from ._clock import from_us, now_us
from ._composition import Composition, _fence
from ._suspend import Suspend
from ._context import Context
from ._replayer import WAIT, Replayer
from ._state import State
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._step_info import _current
from .errors import Cancelled, PromiseRejected, StepTimeout, TerminalError


# The seq the current branch (task) of a handler claimed last, tagged with its context's
# serial. Child tasks inherit their parent's value when spawned; see runtime/_replayer.py.
# Also a token that stands for the branch's position: normally that seq, but a branch that
# ctx.gather/ctx.select spawned starts from a token of its own (see `_enter_branch`).
_branch_last: ContextVar[tuple[int, int, int]] = ContextVar("journal_branch_last", default=(0, 0, 0))
_serials = itertools.count(1)
_WAIT_POLL = 0.002  # how often a waiting operation looks for progress by sibling branches
# Result types that are certainly not awaitable: a step returning one skips `inspect.isawaitable`.
_PLAIN = frozenset({bytes, str, int, float, bool, dict, list, tuple, type(None)})


def _position_after(prev: int, tag: str, name: str | None, call_digest: int | None) -> int:
    text = f"{prev}\x00{tag}\x00{name}\x00{call_digest}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 2


_bare_digests: dict[str, int] = {}


class _Tags(dict):
    """Entry kind -> its tag, looked up once per kind (the hot path asks on every operation)."""

    def __missing__(self, kind: type) -> str:
        tag = self[kind] = kind.__struct_config__.tag
        return tag


_TAGS = _Tags()


def _step_digest(name: str, args: tuple, kwargs: dict) -> int:
    """`digest(name, args, kwargs)`, remembered by name for steps called without arguments."""
    if args or kwargs:
        return digest(name, args, kwargs)
    try:
        return _bare_digests[name]
    except KeyError:
        pass
    if len(_bare_digests) >= 4096:
        _bare_digests.clear()
    found = _bare_digests[name] = digest(name, args, kwargs)
    return found


def idempotency_key(invocation_id: str, step: Step) -> str:
    """The idempotency key `current_step()` gave the journaled `step` of `invocation_id`.

    Use it to match the calls an external API saw (by key) with the journal's steps."""
    return f"{invocation_id}:{_position_after(step.prev, 'step', step.name, step.digest):x}"


class Restart(BaseException):
    """Internal (always-replay mode): unwind after a live step so the handler replays from the top."""


# Weak keys: handlers often pass fresh lambdas, which must not pile up here for ever.
_return_types: "weakref.WeakKeyDictionary[Callable[..., Any], Any]" = weakref.WeakKeyDictionary()


def _return_type(fn: Callable[..., Any]) -> Any:
    try:
        return _return_types[fn]
    except (KeyError, TypeError):
        pass
    try:
        hint = typing.get_type_hints(fn).get("return", Any)
    except Exception:  # unresolvable annotations, builtins, partials: decode untyped
        hint = Any
    if hint is None or hint is type(None):
        hint = Any
    try:
        _return_types[fn] = hint
    except TypeError:  # not weakly referenceable (a builtin): look it up each time
        pass
    return hint


class InvocationContext(Composition, Context):
    """One invocation's context, bound to its replayer, its lease epoch and the committer."""

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
        divergence_wait: float = 0.5,
        key: str | None = None,
        spawner: Any = None,
    ) -> None:
        self._id = invocation_id
        self._serial = next(_serials)
        self._replayer = replayer
        self._committer = committer
        self._epoch = epoch
        self._max = max_entry_bytes
        self._inline_sleep_limit = inline_sleep_limit
        self._always_replay = always_replay
        self._restarting = False
        self._divergence_wait = divergence_wait
        self._exit_mode = committer.durability is Durability.EXIT
        self._commit_inline = committer.commits_inline
        self._pending: list[tuple[int, bytes]] = []  # journaled by sync calls, committed with the next append
        self._pending_state: list[tuple[str, bytes | None]] = []  # state changes that go with them
        # Synchronous operations that ran live while sibling entries were still unclaimed.
        self._tentative: list[tuple[int, type, str | None]] = []
        self._key = key
        self._spawner = spawner  # the engine: starts and runs child invocations
        self.state = State(self, key)
        self._randoms: dict[int, _random.Random] = {}  # by branch position: see random()
        self._uuids: dict[int, int] = {}  # how many uuids each branch position handed out
        self._inflight = 0
        self._idle: anyio.Event | None = None  # exists while a claim waits for steps in flight to end
        self._wake = anyio.Event()  # set when cancellation is requested from outside
        self._quiescing: anyio.Event | None = None
        self.cancel_reason: str | None = None
        self.cancel_delivered = False
        self._cancel_seen = False  # a delivery not yet committed: the next write consumes the request
        self.lost: LeaseLost | None = None
        # The store failed under this execution (a write, or the lease watcher's read):
        # nothing about the handler is decided; the run stops and raises it.
        self.broken: Exception | None = None
        self.on_step: Callable[[str, str, float, bool], None] | None = None

    # -- identity and sync operations -----------------------------------------------------

    @property
    def invocation_id(self) -> str:
        return self._id

    # Randomness and ids derive from the invocation id and the branch's position (the token of
    # its last operation), not from a counter shared by all branches: concurrent branches
    # draw the same numbers on replay whatever order they are scheduled in.

    def random(self) -> _random.Random:
        position = self._last()
        generator = self._randoms.get(position)
        if generator is None:
            seed = hashlib.blake2b(f"{self._id}\x00random\x00{position}".encode(), digest_size=8).digest()
            generator = self._randoms[position] = _random.Random(int.from_bytes(seed, "big"))
        return generator

    def uuid(self) -> _uuid.UUID:
        position = self._last()
        count = self._uuids[position] = self._uuids.get(position, 0) + 1
        raw = hashlib.blake2b(f"{self._id}\x00{position}\x00{count}".encode(), digest_size=16).digest()
        return _uuid.UUID(bytes=raw, version=4)

    def now(self) -> datetime.datetime:
        seq, prev, recorded = self._claim_now(Now)
        if recorded is not None:
            return from_us(recorded.at)
        self._deliver_cancel_sync(seq, prev)
        at = now_us()
        self._pending.append((seq, encode_entry(Now(at, prev), self._max)))
        return from_us(at)

    def patched(self, change_id: str) -> bool:
        self._raise_if_lost()
        if not self._replayer.exhausted:
            last = self._last()
            seq = self._replayer.claim_recorded(last, Patched, change_id)
            if seq is None:
                return False  # recorded before the change: keep the old path
            self._advance(seq, last, Patched, change_id)
            return True
        seq, prev, _ = self._claim_now(Patched, change_id)
        self._pending.append((seq, encode_entry(Patched(change_id, now_us(), prev), self._max)))
        return True

    # -- durable operations ----------------------------------------------------------------

    async def run(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        type: Any = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> Any:
        if not isinstance(name, str) or not name:
            raise TypeError(f"ctx.run needs a step name (a non-empty string) first, got {name!r}")
        if not callable(fn):
            raise TypeError(f"ctx.run({name!r}, fn, ...): fn must be callable, got {fn!r}")
        rtype = type if type is not None else _return_type(fn)
        call_digest = _step_digest(name, args, kwargs)
        seq, prev, recorded = (
            self._claim_at_once(Step, name, call_digest) or await self._claim(Step, name, call_digest)
        )
        if recorded is not None:
            self._report(name, "replayed", 0.0, True)
            if recorded.error is not None:
                raise _rebuild_error(recorded.error)
            try:
                return decode_value(recorded.value, rtype)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                raise self._replayer.divergence(
                    seq, f"step {name!r} with a result that no longer fits its return type", f"step {name!r} "
                    f"returning {getattr(rtype, '__name__', rtype)!s}", [f"decoding the recorded result: {exc}"],
                ) from None
        # The guards repeat each call's own first test: a step pays no coroutine call for
        # what does not apply (the hot path of every live step).
        if self.cancel_reason is not None:
            await self._deliver_cancel(seq, prev)
        if self._tentative:
            await self._settle_tentative()
        if self._pending:
            await self._flush_pending()  # what the step may depend on is durable before its side effect
        if self._restarting:  # always-replay: a sibling's step ended this round; start no side effect in it
            raise Restart()
        started = time.perf_counter() if self.on_step is not None else 0.0
        self._inflight += 1
        try:
            # The key is built from the branch's position, not the seq: after a crash,
            # concurrent branches may be handed other seqs, but each step keeps its key.
            step = (self._id, seq, name, 1, self._last())  # the position `_claim` moved to
            if timeout is None and retry is None:
                # The hot path: one attempt, no deadline. A failure goes on to the retries.
                published = _current.set(step)
                failure: Exception | None = None
                try:
                    value = fn(*args, **kwargs)
                    if value.__class__ not in _PLAIN and inspect.isawaitable(value):  # (`type` is a parameter)
                        value = await value
                except Exception as exc:
                    failure = exc
                finally:
                    _current.reset(published)
                if failure is None:
                    error, attempt = None, 1
                else:  # outside the `except`: later attempts must not see this error as the one in flight
                    value, error, attempt = await self._retry(step, fn, args, kwargs, DEFAULT_RETRY, None, failure)
            else:
                value, error, attempt = await self._retry(step, fn, args, kwargs, retry or DEFAULT_RETRY, timeout)
            if error is not None:
                await self._commit(seq, Step(name, call_digest, now_us(), error=error, attempts=attempt, prev=prev))
                if self.on_step is not None:
                    self._report(name, "failed", time.perf_counter() - started, False)
                raise _rebuild_error(error)
            try:
                raw = encode_value(value)
                result = decode_value(raw, rtype)
            except UnencodableValue as exc:
                raise TerminalError(f"step {name!r} (seq {seq}) returned {exc}") from None
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                raise TerminalError(
                    f"step {name!r} (seq {seq}) returned a value that does not match its declared type "
                    f"{getattr(rtype, '__name__', rtype)!s}: {exc}"
                ) from None
            await self._commit(seq, Step(name, call_digest, now_us(), raw, attempts=attempt, prev=prev))
            if self.on_step is not None:
                self._report(name, "live", time.perf_counter() - started, False)
        finally:
            self._done_one()
        if self._always_replay and self._inflight == 0 and not self._exit_mode:
            self._restarting = True  # siblings reach their next await before the cancellation does
            raise Restart()
        return result

    async def _retry(
        self, step: tuple[str, int, str, int, int], fn: Callable[..., Any], args: tuple, kwargs: dict,
        policy: RetryPolicy, timeout: float | None, failure: Exception | None = None,
    ) -> tuple[Any, ErrorInfo | None, int]:
        """Run the step's attempts under its policy and deadline: `(value, error, attempts)`.
        `failure` is how the first attempt already failed, when the hot path made it."""
        invocation_id, seq, name, attempt, position = step
        while True:
            if failure is None:
                published = _current.set((invocation_id, seq, name, attempt, position))
                try:
                    if timeout is None:
                        return await _call(fn, args, kwargs), None, attempt
                    # Only this deadline is a step timeout; a TimeoutError the function
                    # raises itself (a socket timeout) is an ordinary, retryable error.
                    with anyio.move_on_after(timeout) as deadline:
                        value = await _call(fn, args, kwargs)
                    if not deadline.cancelled_caught:
                        return value, None, attempt
                    failure = StepTimeout(f"step {name!r} (seq {seq}) did not finish within {timeout} s")
                except Exception as exc:
                    failure = exc
                finally:
                    _current.reset(published)
            if isinstance(failure, TerminalError) and not isinstance(failure, StepTimeout):
                return None, ErrorInfo(failure.type_name, failure.message or str(failure), True), attempt
            if policy.retries(failure, attempt):
                await anyio.sleep(policy.delay(attempt))
                attempt += 1
                failure = None
                continue
            if isinstance(failure, StepTimeout):
                return None, ErrorInfo("StepTimeout", str(failure), True), attempt
            message = f"step {name!r} failed after {attempt} attempt{'s' if attempt > 1 else ''}: {failure}"
            return None, ErrorInfo(_type_name(failure), message, True), attempt

    async def sleep(self, seconds: float) -> None:
        seq, prev, recorded = await self._claim(Sleep)
        # The timer counts as in flight: a sibling branch that must suspend (an unresolved
        # promise in ctx.select or gather) waits for it instead of cancelling it.
        with self._busy():
            await self._sleep(seq, prev, recorded, seconds)

    async def _sleep(self, seq: int, prev: int, recorded: Any, seconds: float) -> None:
        if recorded is not None:
            until = recorded.until
            nxt = self._replayer.recorded(seq + 1)
            # Cancellation cut this sleep short when recorded only if it came before the timer
            # was due; a later one was delivered at the branch's next operation.
            if isinstance(nxt, CancelReceived) and nxt.at < until:
                await self._claim(CancelReceived)
        else:
            await self._deliver_cancel(seq, prev)
            at = now_us()
            until = at + int(max(seconds, 0) * 1e6)
            await self._commit(seq, Sleep(at, until, prev))
        remaining = (until - now_us()) / 1e6
        if remaining <= 0:
            return
        cancelling = self.cancel_reason is not None and not self.cancel_delivered
        if remaining > self._inline_sleep_limit and not cancelling:  # a pending cancel is delivered here instead
            await self._quiesce(own=1)
            raise Suspend(wake_at=until)
        with anyio.move_on_after(remaining):
            await self._wake.wait()
        self._raise_if_lost()
        if self.cancel_reason is not None and not self.cancel_delivered:
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
            if resolution is None and (deadline is None or now_us() < deadline):
                await self._flush_pending()
                raise Suspend(waiting=name, wake_at=deadline)
            if resolution is None:
                recorded = Promise(name, now_us(), NIL, "timed out", prev, timed_out=True)
            else:
                recorded = Promise(name, now_us(), resolution.value, resolution.error, prev)
            await self._commit(seq, recorded)
        if recorded.timed_out:
            raise StepTimeout(f"promise {name!r} of invocation {self._id!r} was not resolved within {timeout} s")
        if recorded.error is not None:
            raise PromiseRejected(f"promise {name!r} of invocation {self._id!r} was rejected: {recorded.error}")
        try:
            return decode_value(recorded.value, type if type is not None else Any)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise TerminalError(
                f"promise {name!r} of invocation {self._id!r} (seq {seq}) was resolved with a value that does not "
                f"fit type={getattr(type, '__name__', type)}: {exc}; resolve it with a matching value"
            ) from None

    async def _await_resolution(self, name: str, deadline: int | None) -> Any:
        """The promise's resolution; a deadline near enough is waited for here instead of suspending."""
        store = self._committer.store
        resolution = await self._committer.read(store.resolution, self._id, name)
        while resolution is None and deadline is not None:
            left = (deadline - now_us()) / 1e6
            if left <= 0 or left > self._inline_sleep_limit:
                break
            with anyio.move_on_after(min(left, 0.05)):
                await self._wake.wait()
            self._raise_if_lost()
            if self.cancel_reason is not None:
                break
            resolution = await self._committer.read(store.resolution, self._id, name)
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

    # -- engine side -----------------------------------------------------------------------

    def stop(self, error: Exception) -> None:
        """Stop the handler at its next context call with `error`; a wait in progress wakes for it."""
        if isinstance(error, LeaseLost):
            self.lost = self.lost or error
        else:
            self.broken = self.broken or error
        self._wake.set()

    def request_cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
            self._wake.set()

    async def finish(self, entry: Any | None, transition: Transition) -> Any:
        """Commit the final entry (if any), everything buffered, and the status change, at once."""
        await self._settle_tentative()
        entries, self._pending = self._pending, []
        state, self._pending_state = self._pending_state or None, []
        if entry is not None:
            entries.append((self._replayer.next_live(), encode_entry(entry, self._max)))
        op = Append(self._id, self._epoch, entries, transition, state, self._take_cancel_seen())
        return await self._committer.submit(op, durable=True)

    # -- internals -------------------------------------------------------------------------

    def _position(self) -> tuple[int, int]:
        """(the seq this branch claimed last, the token its next entry records as `prev`)."""
        serial, seq, token = _branch_last.get()
        return (seq, token) if serial == self._serial else (0, 0)

    def _last(self) -> int:
        return self._position()[1]

    def _advance(self, seq: int, prev: int, kind: type, name: str | None = None, call_digest: int | None = None) -> None:
        """Move the branch past the operation it just claimed. The next token hashes the previous
        one with what the operation was, so it names the same position on every execution,
        whichever seq the operation got (idempotency keys are built from it)."""
        _branch_last.set((self._serial, seq, _position_after(prev, _TAGS[kind], name, call_digest)))

    def _enter_branch(self, index: int) -> None:
        """Give the calling task, spawned as branch `index` by ctx.gather/ctx.select, a starting
        token of its own, so that sibling branches making identical calls replay on their own
        recorded paths whatever order they are scheduled in."""
        seq, token = self._position()
        raw = hashlib.blake2b(f"{token}/{index}".encode(), digest_size=6).digest()
        _branch_last.set((self._serial, seq, -1 - int.from_bytes(raw, "big")))

    async def _claim(self, kind: type, name: str | None = None, call_digest: int | None = None) -> tuple[int, int, Any]:
        """Claim this operation's seq: `(seq, prev, recorded entry)`; the entry is None to run live."""
        return self._claim_at_once(kind, name, call_digest) or await self._claim_waiting(kind, name, call_digest)

    def _claim_at_once(self, kind: type, name: str | None = None, call_digest: int | None = None) -> tuple[int, int, Any] | None:
        """`_claim` for the usual case, which needs no waiting: the operation runs live, or its
        entry is the next one recorded on its branch. None: `_claim_waiting` must claim it."""
        if self.lost is not None or self.broken is not None or _fence.get() is not None:
            return None
        after, last = self._position()
        found = self._replayer.claim(last, kind, name, call_digest, after=after)
        if found is WAIT:
            return None
        return self._claimed(found, last, kind, name, call_digest)

    async def _claim_waiting(self, kind: type, name: str | None = None, call_digest: int | None = None) -> tuple[int, int, Any]:
        if self.lost is not None or self.broken is not None:
            self._raise_if_lost()
        after, last = self._position()
        deadline: float | None = None
        while True:
            found = self._replayer.claim(last, kind, name, call_digest, after=after)
            if found is not WAIT:
                break
            # Sibling branches may still claim the entries this operation is waiting behind.
            if self._inflight:
                if self._idle is None:
                    self._idle = anyio.Event()
                await self._idle.wait()
                deadline = None
                continue
            before = self._replayer.claims
            await anyio.sleep(_WAIT_POLL)
            if self._replayer.claims != before:
                deadline = None
                continue
            now = anyio.current_time()
            deadline = deadline if deadline is not None else now + self._divergence_wait
            if now >= deadline:
                raise self._replayer.stuck(last, kind, name, call_digest)
        fence = _fence.get()
        if found[1] is None and fence is not None:
            # A branch that lost a replayed select stops where its recorded path ends.
            fence.parked.set()
            await anyio.sleep_forever()
        return self._claimed(found, last, kind, name, call_digest)

    def _claimed(self, found: tuple[int, Any], last: int, kind: type, name: str | None, call_digest: int | None) -> tuple[int, int, Any]:
        seq, recorded = found
        self._advance(seq, last, kind, name, call_digest)
        if recorded is not None and isinstance(recorded, CancelReceived):
            self.cancel_reason = self.cancel_reason or recorded.reason
            self._raise_cancel(seq)
        return seq, last, recorded

    def _claim_now(self, kind: type, name: str | None = None) -> tuple[int, int, Any]:
        """`_claim` for synchronous operations, which cannot wait for sibling branches: where
        `_claim` would wait, they run live at once, and the wait happens before the next write
        or side effect (`_settle_tentative`), which reports the divergence if there was one."""
        self._raise_if_lost()
        after, last = self._position()
        found = self._replayer.claim(last, kind, name, after=after)
        if found is WAIT:
            found = self._replayer.claim_live(after)
            self._tentative.append((last, kind, name))
        seq, recorded = found
        self._advance(seq, last, kind, name)
        if isinstance(recorded, CancelReceived):
            self.cancel_reason = self.cancel_reason or recorded.reason
            self._raise_cancel(seq)
        return seq, last, recorded

    def _take_cancel_seen(self) -> bool:
        seen, self._cancel_seen = self._cancel_seen, False
        return seen

    def _raise_if_lost(self) -> None:
        if self.lost is not None:
            raise self.lost
        if self.broken is not None:
            raise self.broken

    def _raise_cancel(self, seq: int) -> None:
        self.cancel_delivered = True
        self._cancel_seen = True
        raise Cancelled(f"invocation {self._id!r} was cancelled (at seq {seq})")

    def _deliver_cancel_sync(self, seq: int, prev: int) -> None:
        if self.cancel_reason is not None and not self.cancel_delivered:
            self._pending.append((seq, encode_entry(CancelReceived(now_us(), self.cancel_reason, prev), self._max)))
            self._raise_cancel(seq)

    async def _deliver_cancel(self, seq: int, prev: int, at: int | None = None) -> None:
        if self.cancel_reason is not None and not self.cancel_delivered:
            await self._commit(seq, CancelReceived(now_us() if at is None else at, self.cancel_reason, prev))
            self._raise_cancel(seq)

    @contextmanager
    def _busy(self) -> Iterator[None]:
        """Count an operation in flight (a running step, a timer) while the block runs."""
        self._inflight += 1
        try:
            yield
        finally:
            self._done_one()

    def _done_one(self) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None
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

    async def _settle_tentative(self) -> None:
        """Wait until sibling branches claimed the entries that synchronous operations ran
        live beside; if they never do, those operations diverged."""
        while self._tentative:
            last, kind, name = self._tentative[0]
            deadline: float | None = None
            while self._replayer.others_after(last):
                before = self._replayer.claims
                await anyio.sleep(_WAIT_POLL)
                if self._replayer.claims != before or self._inflight:
                    deadline = None
                    continue
                now = anyio.current_time()
                deadline = deadline if deadline is not None else now + self._divergence_wait
                if now >= deadline:
                    raise self._replayer.stuck(last, kind, name)
            self._tentative.pop(0)

    async def _flush_pending(self) -> None:
        if self._pending and not self._exit_mode:
            await self._commit(0, None)

    async def _commit(self, seq: int, entry: Any) -> None:
        """Journal `entry` at `seq`, with the entries synchronous operations left pending
        before it (with `entry` None, only those)."""
        if entry is None:
            entries, self._pending = self._pending, []
        else:
            data = encode_entry(entry, self._max)
            if self._exit_mode:
                self._pending.append((seq, data))
                return
            entries = [(seq, data)]
            if self._pending:
                entries, self._pending = self._pending + entries, []
        if self._tentative:
            await self._settle_tentative()
        state = None
        if self._pending_state:
            state, self._pending_state = self._pending_state, []
        op = Append(self._id, self._epoch, entries, None, state, self._take_cancel_seen())
        try:
            if self._commit_inline:  # `async` durability: nothing to wait for, so no coroutine
                self._committer.commit_now(op)
            else:
                await self._committer.submit(op)
        except LeaseLost as exc:
            self.lost = exc
            raise
        except StoreError as exc:
            self.broken = exc
            raise

    def _report(self, name: str, how: str, seconds: float, replayed: bool) -> None:
        if self.on_step is not None:
            self.on_step(name, how, seconds, replayed)


async def _call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def _type_name(exc: BaseException) -> str:
    return type(exc).__qualname__


def _rebuild_error(error: ErrorInfo) -> TerminalError:
    if error.type == "PromiseRejected":
        return PromiseRejected(error.message)
    if error.type == "StepTimeout":
        return StepTimeout(error.message, type_name="StepTimeout")
    return TerminalError(error.message, type_name=error.type)
