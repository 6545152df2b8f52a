"""A step under limits: each attempt takes its units first and gives them back when it ends,
settling its token estimate with what the step reported (`current_step().used(...)`). A
provider's push-back pauses the limits for every process and runs the attempt again once the
pause ends, without using up an attempt of the step's `RetryPolicy`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from journal.limits import Blocked

from ..._base._step_info import Usage, _usage
from ._pushback import pushback

# A provider that keeps pushing back this many times in a row fails the attempt as an ordinary
# error (its RetryPolicy then decides), rather than looping for ever.
MOST_PUSHBACKS = 100


def limited(fn: Callable[..., Any], limiter: Any, names: tuple[str, ...], tokens: int, label: str,
            priority: int = 0) -> Callable[..., Any]:
    """`fn` (a step function, as `ctx.run` would call it) run under the limits `names`."""

    async def attempt(*args: Any, **kwargs: Any) -> Any:
        pushbacks = 0
        while True:
            # The uncontended path takes and gives back without an await (a store whose calls do
            # not block: nothing there to cancel), the others wait in line.
            request = limiter.request(names, tokens=tokens, priority=priority, label=label)
            answer = limiter.acquire_now(request)
            if answer is None or answer.__class__ is Blocked:
                await limiter.wait(request, answer)
            hid = request.hid
            usage = Usage(parent=_usage.get())  # a budget counts it too
            token = _usage.set(usage)
            try:
                value = fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                _usage.reset(token)
                await limiter.release(hid, names, usage.tokens)
                wait = pushback(exc)
                if wait is None or pushbacks >= MOST_PUSHBACKS:
                    raise
                pushbacks += 1
                await limiter.pause(names, wait)
                continue
            except BaseException:
                _usage.reset(token)
                await limiter.release(hid, names, usage.tokens)
                raise
            _usage.reset(token)
            if not limiter.release_now(hid, names, usage.tokens):
                await limiter.release(hid, names, usage.tokens)
            return value

    return attempt
