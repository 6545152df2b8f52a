"""`journaled(session)`: an `mcp.ClientSession` whose calls to the server are journaled steps.

`list_tools`, `call_tool`, `read_resource` and `get_prompt` each run as one step through
`current_context().run(...)`, named after the call (and the tool or prompt), with the
call's JSON arguments in the step's digest (replay checks them). The result is journaled as
its JSON form (the MCP types are Pydantic models) and rebuilt from it, live and on replay
alike. Anything else (`initialize`, notifications, `send_ping`, ...) goes to the session
as it is: it happens again after a restart, as opening the session does.

Called from inside a step (a tool of an agent framework that is itself journaled), a call
goes straight to the session: the enclosing step is what the journal records. Outside a
handler it raises instead of calling the server without a journal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import mcp.types as types
from pydantic import BaseModel

from journal.errors import JournalError
from runtime import RetryPolicy, current_context, handler_context

R = TypeVar("R", bound=BaseModel)


class JournaledSession:
    """An `mcp.ClientSession` (or anything with its methods, such as `mcp.Client`) whose calls
    that reach the server are journaled steps named `{prefix}.call_tool:{tool}` and so on."""

    def __init__(self, session: Any, *, prefix: str = "mcp", retry: RetryPolicy | None = None) -> None:
        self.session = session
        self.prefix = prefix
        self.retry = retry

    async def list_tools(self, *args: Any, **kwargs: Any) -> types.ListToolsResult:
        """`session.list_tools(...)` as the step `{prefix}.list_tools`."""
        return await self._step("list_tools", types.ListToolsResult, self.session.list_tools, (), args, kwargs)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *args: Any,
                        **kwargs: Any) -> types.CallToolResult:
        """`session.call_tool(name, arguments, ...)` as the step `{prefix}.call_tool:{name}`."""
        return await self._step(f"call_tool:{name}", types.CallToolResult, self.session.call_tool,
                                (name, arguments), args, kwargs)

    async def read_resource(self, uri: Any, *args: Any, **kwargs: Any) -> types.ReadResourceResult:
        """`session.read_resource(uri, ...)` as the step `{prefix}.read_resource`."""
        return await self._step("read_resource", types.ReadResourceResult, self.session.read_resource,
                                (str(uri),), args, kwargs)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None, *args: Any,
                         **kwargs: Any) -> types.GetPromptResult:
        """`session.get_prompt(name, arguments, ...)` as the step `{prefix}.get_prompt:{name}`."""
        return await self._step(f"get_prompt:{name}", types.GetPromptResult, self.session.get_prompt,
                                (name, arguments), args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)  # every other call goes to the session itself

    async def _step(self, what: str, result_type: type[R], call: Callable[..., Awaitable[R]],
                    digested: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        async def calling(*given: Any) -> R:
            return await call(*given, *args, **kwargs)

        return await journal_call(f"{self.prefix}.{what}", result_type, calling, digested, retry=self.retry)


async def journal_call(name: str, result_type: type[R], call: Callable[..., Awaitable[R]],
                       digested: tuple[Any, ...], *, retry: RetryPolicy | None = None) -> R:
    """`await call(*digested)` as the step `name` of the calling handler: the result journaled as
    its JSON form and rebuilt as `result_type`, and `digested` (JSON arguments) in the step's
    digest. Inside a step it is a plain call; outside a handler it refuses."""
    ctx = handler_context()
    if ctx is None:
        try:
            current_context()
        except LookupError:
            raise JournalError(
                f"journaled MCP call {name!r} was made outside a handler, where nothing would journal it; "
                "call it from an `async def handler(ctx, ...)` (or use the session itself, unjournaled)"
            ) from None
        return await call(*digested)  # inside a step: the enclosing step is the journaled unit

    async def step(*given: Any) -> Any:
        result = await call(*given)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    # The JSON arguments are the step's arguments, so replay checks that the call is the same.
    payload = await ctx.run(name, step, *digested, retry=retry, type=Any)
    return result_type.model_validate(payload)


def journaled(session: Any, *, prefix: str = "mcp", retry: RetryPolicy | None = None) -> JournaledSession:
    """Wrap `session` (an `mcp.ClientSession`) so that `list_tools`, `call_tool`, `read_resource`
    and `get_prompt` are journaled steps of the calling handler. `prefix` names the steps (give
    each server its own when a handler talks to several); `retry` is their `RetryPolicy`."""
    return JournaledSession(session, prefix=prefix, retry=retry)
