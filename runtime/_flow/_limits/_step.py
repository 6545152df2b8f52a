"""A step under limits: each attempt takes its units first and gives them back when it ends,
settling its token estimate with what the step reported (`current_step().used(...)`). A
provider's push-back pauses the limits for every process and runs the attempt again once the
pause ends, without using up an attempt of the step's `RetryPolicy`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from journal.limits import Blocked

from ..._base._step_info import PLAIN, Usage, _usage
from ._pushback import pushback

# A provider that keeps pushing back this many times in a row fails the attempt as an ordinary
# error (its RetryPolicy then decides), rather than looping for ever.
MOST_PUSHBACKS = 100


def limited(fn: Callable[..., Any], limiter: Any, names: tuple[str, ...], tokens: int, label: str,
            priority: int = 0) -> Callable[..., Any]:
    """`fn` (a step function, as `ctx.run` would call it) run under the limits `names`.

    Where the store's calls do not block, an attempt takes its units and gives them back in
    plain calls, and one whose function returns at once makes no coroutine either (the
    uncontended path of a step); anything else (a line to wait in, an awaitable, a push-back)
    goes on in a coroutine, which the step awaits."""

    def attempt(*args: Any, **kwargs: Any) -> Any:
        request = limiter.request(names, tokens=tokens, priority=priority, label=label)
        answer = limiter.acquire_now(request)
        if answer is None or answer.__class__ is Blocked:
            return attempts(request, answer, args, kwargs)
        hid = request.hid
        usage = Usage(parent=_usage.get())  # a budget counts it too
        token = _usage.set(usage)
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:
            _usage.reset(token)
            limiter.release_now(hid, names, usage.tokens)
            wait = pushback(exc)
            if wait is None or MOST_PUSHBACKS <= 0:
                raise
            return attempts(None, None, args, kwargs, wait)
        except BaseException:
            _usage.reset(token)
            limiter.release_now(hid, names, usage.tokens)
            raise
        if value.__class__ not in PLAIN and inspect.isawaitable(value):
            return finish(hid, usage, token, value, args, kwargs)
        _usage.reset(token)
        limiter.release_now(hid, names, usage.tokens)
        return value

    async def finish(hid: str, usage: Usage, token: Any, value: Any, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
        """The rest of an attempt whose function returned an awaitable."""
        return await attempts(None, None, args, kwargs, held=(hid, usage, token, value))

    async def attempts(request: Any, answer: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                       wait: float | None = None, held: tuple[str, Usage, Any, Any] | None = None) -> Any:
        """Attempts that wait: in line (`request`, as `acquire_now` answered it), or first for a
        provider's push-back of `wait` seconds (the first of `MOST_PUSHBACKS`); or the rest of
        one under way (`held`: its hold, usage, usage token and the awaitable it returned)."""
        pushbacks = 0
        while True:
            if held is not None:
                hid, usage, token, value = held
                held = None
            else:
                if wait is not None:  # a push-back: every process pauses, then the step runs again
                    pushbacks += 1
                    await limiter.pause(names, wait)
                    wait = None
                if request is None:
                    request = limiter.request(names, tokens=tokens, priority=priority, label=label)
                    answer = limiter.acquire_now(request)
                if answer is None or answer.__class__ is Blocked:
                    await limiter.wait(request, answer)
                hid = request.hid
                request = None
                usage = Usage(parent=_usage.get())
                token = _usage.set(usage)
                value = None
            try:
                if value is None:
                    value = fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                _usage.reset(token)
                await limiter.release(hid, names, usage.tokens)
                wait = pushback(exc)
                if wait is None or pushbacks >= MOST_PUSHBACKS:
                    raise
                continue
            except BaseException:
                _usage.reset(token)
                await limiter.release(hid, names, usage.tokens)
                raise
            _usage.reset(token)
            await limiter.release(hid, names, usage.tokens)
            return value

    return attempt
