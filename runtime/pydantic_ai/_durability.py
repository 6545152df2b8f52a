"""`JournalDurability`: Pydantic AI's durability capability for journal handlers.

Built on `BaseDurabilityCapability`, which owns everything Pydantic AI-specific (which
operations are durable, their names, how models and toolsets cross the boundary); this
class says where the durable container is (a handler's code, `current_context()`), gives
the backend that runs each operation as a step, and supplies what a run needs to replay
the same: its id and start time from the journal, its waits for input as promises, its
sleeps as durable timers.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from datetime import datetime
from typing import Any, Literal, cast

import anyio
from pydantic_ai import Agent
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetKind,
    ToolsetValidateToolArgumentsId,
    conversation_id_from_run_id,
    external_event_scope,
    replay_scope,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import AgentStreamEvent, PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import ToolsetTool

from runtime import Cancelled, TerminalError, current_step, handler_context

from ._backend import StepBackend, StepConfig
from ._waits import PromiseWaits


def _unencodable(exc: Exception) -> BaseException:
    return TerminalError(f"a Pydantic AI result cannot be journaled: {exc}")


class JournalDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent durable inside journal handlers: `Agent(..., capabilities=[JournalDurability()])`.

    Every model request, tool call (function, MCP and dynamic toolsets) and MCP discovery of a
    run inside a handler is a journaled step named as Pydantic AI names it
    (`{agent}__model.request`, `{agent}__function_toolset__{id}.call_tool:{tool}`, ...); on
    replay the journaled results come back and nothing is called again. Tool calls the model
    makes together run in parallel. A wait for external input (`HandleDeferredToolCalls`) becomes a
    promise, answered with `journal resolve`.

    Args:
        models: Other models a run may switch to, by id (`agent.run(model="fast")`): a `Model`
            instance cannot cross into a step, so it is looked up there by its id.
        event_stream_handler: Pydantic AI's event stream handler; the model's events reach it
            live, inside the model request's step, and each tool event inside a step of its own.
        name: The name the steps are named by (default: the agent's `name`, which is then required).
        stream: Stream every model request, so that the text the model sends reaches the
            invocation's followers live (`Engine.stream` chunks, the HTTP events stream,
            `journal tail -f`, the web UI) while the step runs. The step's journaled result is
            the whole response, as without streaming. Requests streamed for another reason
            (`agent.run_stream`, an `event_stream_handler`) send their text live too.
        model_step, tool_step, mcp_step: How those steps run (`StepConfig`: a `RetryPolicy`, a
            deadline); a tool's own metadata `{"journal": StepConfig(...)}` (or `False`, to run it
            in handler code) overrides `tool_step` for that tool.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="journal",
        durable_unit_noun="step",
        durable_unit_plural="steps",
        durable_container_noun="handler",
        codec=JSON_CODEC,  # steps journal msgspec-encoded values: Pydantic AI's reduce to JSON first
        serialization_failure=_unencodable,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        # MCP servers are entered by the first step that needs one: a replay that needs none
        # connects to none.
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit", "dynamic": "enter-never"},
        journal_discovery=True,
        # Replay matches each step by its branch's position, not by a counter, so parallel
        # tool calls need no turnstile.
        sequential_tools_in_durable_context=False,
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        tool_config_key="journal",
        cancellation_error_types=(Cancelled,),
    )

    def __init__(
        self,
        *,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        name: str | None = None,
        stream: bool = False,
        model_step: StepConfig | None = None,
        tool_step: StepConfig | None = None,
        mcp_step: StepConfig | None = None,
        limit: str | list[str] | None = None,
    ) -> None:
        self._user_handler = event_stream_handler
        self._stream = stream
        # The handler the base hands a streamed request's events to, inside its step: it sends
        # their text live, then passes them on to the user's handler, if any.
        super().__init__(models=models, event_stream_handler=_LiveText(event_stream_handler), name=name)
        self._model_step: StepConfig = dict(model_step or {})  # type: ignore[assignment]
        if limit is not None:  # every model request under the store's limits (docs/limits.md)
            self._model_step["limit"] = limit
        self._tool_step: StepConfig = tool_step or {}
        self._mcp_step: StepConfig = mcp_step or {}

    # -- where the durable container is ----------------------------------------------------------

    @property
    def in_durable_context(self) -> bool:
        """Handler code: a journal handler (or a task it spawned) is running, and not inside a step."""
        return handler_context() is not None

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        if not self.in_durable_context:
            if _in_step():
                return await handler()  # an agent run by a step (a tool): the step is what is journaled
            raise UserError(
                f"agent {self.name!r} has JournalDurability, but it is running outside a journal handler, where "
                "nothing would be journaled: run it from `async def handler(ctx, ...)` (Engine.run, journal run, "
                "a worker), or build the agent without JournalDurability to run it plainly"
            )
        with external_event_scope(PromiseWaits(self.name)), replay_scope(), Agent.using_sleep(_durable_sleep):
            return await super().wrap_run(ctx, handler=handler)

    # -- replay-safe identity and time -----------------------------------------------------------

    def get_default_run_id(self) -> str | None:
        ctx = handler_context()
        return str(ctx.uuid()) if ctx is not None else None

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        ctx = handler_context()
        return ctx.now() if ctx is not None else None  # journaled: the same on replay

    # -- live output ---------------------------------------------------------------------------------

    @property
    def has_wrap_run_event_stream(self) -> bool:
        # Asking for the run's events makes Pydantic AI stream its model requests.
        return self._stream or self._user_handler is not None

    async def wrap_run_event_stream(
        self, ctx: RunContext[AgentDepsT], *, stream: AsyncIterable[AgentStreamEvent]
    ) -> AsyncIterable[AgentStreamEvent]:
        if self._user_handler is not None:
            async for event in super().wrap_run_event_stream(ctx, stream=stream):
                yield event
            return
        async for event in stream:  # live text only: no step for each of the run's other events
            yield event

    # -- how each operation runs -----------------------------------------------------------------------

    def get_durable_operation_backend(self) -> DurableOperationBackend[StepConfig]:
        def tool_config(operation_id: DurableOperationId, tool: object | None,
                        tool_name: str) -> StepConfig | Literal[False]:
            assert isinstance(operation_id, ToolsetCallToolId | ToolsetValidateToolArgumentsId)
            resolve = self._build_resolve_tool_config(self._toolset_base_config(operation_id.toolset_kind))
            return cast(StepConfig | Literal[False], resolve(cast(ToolsetTool[Any] | None, tool), tool_name))

        return StepBackend(
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=RoleBasedOperationConfig(model=self._model_step, event=self._tool_step, capability=self._tool_step,
                                            tool=self._tool_step, resolve_tool=tool_config),
        )

    def _toolset_base_config(self, kind: ToolsetKind) -> Any:
        return self._mcp_step if kind == "mcp" else self._tool_step


async def _durable_sleep(seconds: float) -> None:
    """The agent graph's waits (between polls of a background response) as durable timers."""
    ctx = handler_context()
    if ctx is not None:
        await ctx.sleep(seconds)
    else:
        await anyio.sleep(max(seconds, 0))


def _in_step() -> bool:
    try:
        current_step()
    except LookupError:
        return False
    return True


class _LiveText:
    """The event stream handler of a streamed model request's step: each piece of text the model
    sends goes live to the invocation's followers, then the event to the user's handler."""

    def __init__(self, user: EventStreamHandler[Any] | None) -> None:
        self._user = user

    async def __call__(self, ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        if self._user is None:
            async for event in events:
                _send(event)
            return

        async def sent() -> AsyncIterator[AgentStreamEvent]:
            async for event in events:
                _send(event)
                yield event

        await self._user(ctx, sent())


def _send(event: AgentStreamEvent) -> None:
    text = None
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        text = event.part.content
    elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        text = event.delta.content_delta
    if text and _in_step():
        current_step().emit(text)
