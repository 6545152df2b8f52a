"""Pydantic AI's waits for external input (`RequestInput`, `wait_for_external_event`) as promises.

A wait is two operations of the handler: a step that makes the wait's token and calls
`ask` with it (so a replay neither makes another token nor asks again), then, unless `ask`
answered at once, `ctx.promise(token)`. The token is the promise's name: the wait's own
name and a hash of the step's position in its branch, so it is the same on every replay and
different for every wait (`deferred_tool_calls.3f2a9c1d4e5b`). Resolving it
(`journal resolve ID TOKEN JSON`, `POST /invocations/ID/promises/TOKEN`, the web UI) wakes
the run, in whichever process resumes it; a rejection or the timeout ends the wait with
`ExternalEventError`, as Pydantic AI's own waits do."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from pydantic import JsonValue
from pydantic_ai.durable_exec import ExternalEventError, ExternalEventWaiter

from runtime import PromiseRejected, StepTimeout, current_context, current_step


class PromiseWaits(ExternalEventWaiter):
    """The waits of the runs of agent `agent` as promises of the calling handler."""

    def __init__(self, agent: str) -> None:
        self._agent = agent

    async def wait(self, name: str, *, ask: Callable[[str], Awaitable[JsonValue]],
                   timeout: timedelta | None) -> JsonValue:
        ctx = current_context()

        async def asked() -> dict[str, Any]:
            position = hashlib.blake2b(current_step().idempotency_key.encode(), digest_size=6).hexdigest()
            token = f"{name}.{position}"
            return {"token": token, "answer": await ask(token)}

        asking = await ctx.run(f"{self._agent}__external_event.{name}.ask", asked, type=dict[str, Any])
        if asking["answer"] is not None:
            return asking["answer"]  # type: ignore[no-any-return]  # (JSON, as journaled)
        try:
            answer = await ctx.promise(asking["token"], timeout=None if timeout is None else timeout.total_seconds())
        except PromiseRejected as exc:
            raise ExternalEventError(exc.reason or str(exc)) from None
        except StepTimeout:
            raise ExternalEventError(f"No resolution arrived within {timeout}.") from None
        return answer  # type: ignore[no-any-return]
