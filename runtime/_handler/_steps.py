"""What running a step's function takes: its attempts under a retry policy and a deadline,
the type its result decodes to, the digest of its call, the entry that journals how it
ended, and how a journaled result is handed back (or its error raised) on replay.
`InvocationContext.run` (runtime/_handler/_invocation.py) strings these together around its claim."""

from __future__ import annotations

import inspect
import typing
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import msgspec

from journal import ErrorInfo, Step, UnencodableValue, decode_value, digest, encode_value, now_us

from .._base._step_info import Running, _current
from .._replay._machine import position_after
from ..errors import PromiseRejected, StepTimeout, TerminalError
from ._handlers import type_text
from ._retry import RetryPolicy

_bare_digests: dict[str, int] = {}


def check_step(name: Any, fn: Any) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"ctx.run needs a step name (a non-empty string) first, got {name!r}")
    if not callable(fn):
        raise TypeError(f"ctx.run({name!r}, fn, ...): fn must be callable, got {fn!r}")


def step_digest(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
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
    return f"{invocation_id}:{position_after(step.prev, 'step', step.name, step.digest):016x}"


# Weak keys: handlers often pass fresh lambdas, which must not pile up here for ever.
_return_types: weakref.WeakKeyDictionary[Callable[..., Any], Any] = weakref.WeakKeyDictionary()


def return_type(fn: Callable[..., Any]) -> Any:
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


def replayed_result(replayer: Any, seq: int, name: str, recorded: Step, rtype: Any) -> Any:
    """What a replayed step hands back: its journaled result, or its journaled error raised."""
    if recorded.error is not None:
        raise rebuild_error(recorded.error)
    try:
        return decode_value(recorded.value, rtype)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise replayer.divergence(
            seq, f"step {name!r} with a result that no longer fits its return type", f"step {name!r} "
            f"returning {type_text(rtype)}", [f"decoding the recorded result: {exc}"],
        ) from None


def step_entry(name: str, call_digest: int, seq: int, prev: int, value: Any, error: ErrorInfo | None,
               attempt: int, rtype: Any) -> tuple[Step, Any]:
    """The entry that journals how a live step ended, and the result `ctx.run` returns: the
    value as decoded from its journaled bytes, so a live run and a replay return the same."""
    if error is None:
        try:
            raw = encode_value(value)
            return Step(name, call_digest, now_us(), raw, attempts=attempt, prev=prev), decode_value(raw, rtype)
        except UnencodableValue as exc:
            error = ErrorInfo("TerminalError", f"step {name!r} (seq {seq}) returned {exc}", True)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            error = ErrorInfo("TerminalError", (
                f"step {name!r} (seq {seq}) returned a value that does not match its declared type "
                f"{type_text(rtype)}: {exc}"), True)
    return Step(name, call_digest, now_us(), error=error, attempts=attempt, prev=prev), None


async def attempts(
    step: Running, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
    policy: RetryPolicy, timeout: float | None, failure: Exception | None = None,
) -> tuple[Any, ErrorInfo | None, int, Exception | None]:
    """Run the step's attempts under its policy and deadline: `(value, error, attempts, raised)`,
    where `raised` is what the step function raised last, if it failed. `failure` is how the
    first attempt already failed, when the caller made it."""
    invocation_id, seq, name, attempt, position, ctx = step
    while True:
        if failure is None:
            published = _current.set((invocation_id, seq, name, attempt, position, ctx))
            try:
                if timeout is None:
                    return await call(fn, args, kwargs), None, attempt, None
                # Only this deadline is a step timeout; a TimeoutError the function
                # raises itself (a socket timeout) is an ordinary, retryable error.
                with anyio.move_on_after(timeout) as deadline:
                    value = await call(fn, args, kwargs)
                if not deadline.cancelled_caught:
                    return value, None, attempt, None
                failure = StepTimeout(f"step {name!r} (seq {seq}) did not finish within {timeout} s")
            except Exception as exc:
                failure = exc
            finally:
                _current.reset(published)
        if isinstance(failure, TerminalError) and not isinstance(failure, StepTimeout):
            return None, ErrorInfo(failure.type_name, failure.message or str(failure), True), attempt, failure
        if policy.retries(failure, attempt):
            await anyio.sleep(policy.delay(attempt))  # the backoff between attempts
            attempt += 1
            failure = None
            continue
        if isinstance(failure, StepTimeout):
            return None, ErrorInfo("StepTimeout", str(failure), True), attempt, None
        message = f"step {name!r} failed after {attempt} attempt{'s' if attempt > 1 else ''}: {failure}"
        return None, ErrorInfo(type(failure).__qualname__, message, True), attempt, failure


async def call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def rebuild_error(error: ErrorInfo) -> TerminalError:
    if error.type == "PromiseRejected":
        return PromiseRejected(error.message)
    if error.type == "StepTimeout":
        return StepTimeout(error.message, type_name="StepTimeout")
    return TerminalError(error.message, type_name=error.type)
