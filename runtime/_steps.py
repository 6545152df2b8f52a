"""What running a step's function takes: its attempts under a retry policy and a deadline,
the type its result decodes to, the digest of its call, and how a journaled error is raised."""

from __future__ import annotations

import inspect
import typing
import weakref
from collections.abc import Callable
from typing import Any

import anyio

from journal import ErrorInfo, Step, digest

from ._branches import position_after
from ._retry import RetryPolicy
from ._step_info import _current
from .errors import PromiseRejected, StepTimeout, TerminalError

# Result types that are certainly not awaitable: a step returning one skips `inspect.isawaitable`.
PLAIN = frozenset({bytes, str, int, float, bool, dict, list, tuple, type(None)})

_bare_digests: dict[str, int] = {}


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


async def attempts(
    step: tuple[str, int, str, int, int], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
    policy: RetryPolicy, timeout: float | None, failure: Exception | None = None,
) -> tuple[Any, ErrorInfo | None, int]:
    """Run the step's attempts under its policy and deadline: `(value, error, attempts)`.
    `failure` is how the first attempt already failed, when the caller made it."""
    invocation_id, seq, name, attempt, position = step
    while True:
        if failure is None:
            published = _current.set((invocation_id, seq, name, attempt, position))
            try:
                if timeout is None:
                    return await call(fn, args, kwargs), None, attempt
                # Only this deadline is a step timeout; a TimeoutError the function
                # raises itself (a socket timeout) is an ordinary, retryable error.
                with anyio.move_on_after(timeout) as deadline:
                    value = await call(fn, args, kwargs)
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
            await anyio.sleep(policy.delay(attempt))  # the backoff between attempts
            attempt += 1
            failure = None
            continue
        if isinstance(failure, StepTimeout):
            return None, ErrorInfo("StepTimeout", str(failure), True), attempt
        message = f"step {name!r} failed after {attempt} attempt{'s' if attempt > 1 else ''}: {failure}"
        return None, ErrorInfo(type(failure).__qualname__, message, True), attempt


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
