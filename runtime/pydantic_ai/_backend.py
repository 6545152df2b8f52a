"""How Pydantic AI's durable operations run on journal: each is one `ctx.run` step.

Pydantic AI names each operation (`support__model.request`,
`support__function_toolset__tools.call_tool:lookup`, ...) and hands the backend a body that
returns the operation's result already reduced to JSON (the engine declares `JSON_CODEC`),
which is what the step journals. The step's position in its branch, not a counter, is what
replay matches it by, so tool calls that run in parallel replay into the right calls
whatever order they finish in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypedDict

from pydantic_ai.durable_exec import DurableOperationId, JournalCallableOperationBackend, record_durable_unit

from runtime import RetryPolicy, current_context


class StepConfig(TypedDict, total=False):
    """How the steps of one kind of operation run: their `RetryPolicy` and deadline (seconds).

    Per tool: `@agent.tool(metadata={"journal": StepConfig(retry=RetryPolicy(max_attempts=5))})`,
    or `{"journal": False}` to run the tool in handler code instead of a step (it must then be
    deterministic, as handler code is)."""

    retry: RetryPolicy
    timeout: float


class StepBackend(JournalCallableOperationBackend[StepConfig]):
    """Runs each durable operation as one step of the calling handler."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: StepConfig,
    ) -> object:
        ran = False

        async def step() -> Any:
            nonlocal ran
            ran = True
            return await body()

        # `type=Any`: the payload is JSON, and a fresh closure's annotations are not worth reading each time.
        result = await current_context().run(name, step, retry=config.get("retry"), timeout=config.get("timeout"),
                                             type=Any)
        # Pydantic AI keeps the spans and metrics of replayed work out of its telemetry.
        record_durable_unit(executed=ran)
        return result
