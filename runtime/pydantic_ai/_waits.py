"""Pydantic AI's waits for external input (`HandleDeferredToolCalls`, `wait_for_external_event`) as promises.

A wait is two operations of the handler: a step that makes the wait's token and calls
`ask` with it (so a replay neither makes another token nor asks again), then, unless `ask`
answered at once, `ctx.promise(token)`. The token is the promise's name: the wait's own
name and a hash of the step's position in its branch, so it is the same on every replay and
different for every wait (`deferred_tool_calls.3f2a9c1d4e5b`). Resolving it
(`journal resolve ID TOKEN JSON`, `POST /invocations/ID/promises/TOKEN`, the web UI) wakes
the run, in whichever process resumes it; a rejection or the timeout ends the wait with
`ExternalEventError`, as Pydantic AI's own waits do.

A wait of Pydantic AI's `HandleDeferredToolCalls` for deferred tool calls (a handler that
takes a resume token; `RequestInput` before pydantic-ai 2.78) is a typed promise
(`ctx.promise(token, type=...)`): its value must decide each call pending at that wait,
`{"approvals": {CALL_ID: true | false | {...}}, "calls": {CALL_ID: RESULT}}`. So a value
that would fail the run later (`true`, or a decision for other calls) is refused when it is
resolved (exit 2, HTTP 422) and the run stays suspended, and the suspension's hint shows a
value that approves every pending call."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, create_model
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.durable_exec import ExternalEventError, ExternalEventWaiter
from pydantic_ai.tools import DeferredToolRequests

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
        decision = _decision_type(ask)
        try:
            answer = await ctx.promise(asking["token"], type=decision,
                                       timeout=None if timeout is None else timeout.total_seconds())
        except PromiseRejected as exc:
            raise ExternalEventError(exc.reason or str(exc)) from None
        except StepTimeout:
            raise ExternalEventError(f"No resolution arrived within {timeout}.") from None
        if isinstance(answer, BaseModel):  # a decision, checked: back to the JSON Pydantic AI reads
            dumped: JsonValue = answer.model_dump(mode="json", by_alias=True, exclude_unset=True)
            return dumped
        return answer  # type: ignore[no-any-return]


def _decision_type(ask: Callable[[str], Awaitable[JsonValue]]) -> Any:
    """The type of the value a `HandleDeferredToolCalls` wait takes, if `ask` is one's (None for
    any other wait, whose value is any JSON). `wait_for_external_event` hands the waiter a
    closure over the `ask` it was given, which for `HandleDeferredToolCalls` is a partial of
    the capability's method over the run context and the pending requests (pydantic-ai 2.78;
    the deprecated `RequestInput` is a subclass): found there, or not at all, in which case the
    wait takes any JSON as before."""
    cells = [cell.cell_contents for cell in getattr(ask, "__closure__", None) or ()]
    given = next((c for c in (ask, *cells) if isinstance(c, functools.partial)
                  and isinstance(getattr(c.func, "__self__", None), HandleDeferredToolCalls)), None)
    if given is None:
        return None
    requests = next((arg for arg in given.args if isinstance(arg, DeferredToolRequests)), None)
    if requests is None:
        return None
    return _decision(tuple(call.tool_call_id for call in requests.approvals),
                     tuple(call.tool_call_id for call in requests.calls))


# An approval: true, false, or Pydantic AI's own form ({"kind": "tool-denied", "message": ...});
# `Literal[True]` first, so the example a suspension shows approves.
_Approval = Literal[True] | bool | dict[str, Any]


@functools.lru_cache(maxsize=256)
def _decision(approvals: tuple[str, ...], calls: tuple[str, ...]) -> type[BaseModel]:
    """A decision on exactly these pending calls (ids as the model made them, any characters)."""
    fields: dict[str, Any] = {}  # (`Any`: create_model's keyword types cannot be spelled for a built mapping)
    if approvals:
        fields["approvals"] = (_ids_model("Approvals", approvals, _Approval), ...)
    if calls:
        fields["calls"] = (_ids_model("Results", calls, Any), ...)
    made: type[BaseModel] = create_model("DeferredToolDecision", __config__=ConfigDict(extra="allow"), **fields)
    return made


def _ids_model(name: str, ids: tuple[str, ...], value: Any) -> type[BaseModel]:
    fields: dict[str, Any] = {f"call_{i}": (value, Field(alias=call_id)) for i, call_id in enumerate(ids)}
    made: type[BaseModel] = create_model(name, __config__=ConfigDict(extra="forbid"), **fields)
    return made
