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

from runtime import RetryPolicy, current_context, current_step


def _usage_tokens(result: object) -> int | None:
    """The tokens a model response (as JSON) says it used: input and output."""
    usage = result.get("usage") if isinstance(result, dict) else None
    if not isinstance(usage, dict):
        return None
    counts = [usage.get(k) for k in ("input_tokens", "output_tokens")]
    return sum(c for c in counts if isinstance(c, int)) or None


class StepConfig(TypedDict, total=False):
    """How the steps of one kind of operation run: their `RetryPolicy` and deadline (seconds).

    Per tool: `@agent.tool(metadata={"journal": StepConfig(retry=RetryPolicy(max_attempts=5))})`,
    or `{"journal": False}` to run the tool in handler code instead of a step (it must then be
    deterministic, as handler code is)."""

    retry: RetryPolicy
    timeout: float
    limit: str | list[str]  # the store's limits each attempt takes a unit of (docs/limits.md)
    tokens: int  # the estimate reserved against a --tokens rule, settled by the response's usage


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

        limit = config.get("limit")

        async def step() -> Any:
            nonlocal ran
            ran = True
            result = await body()
            if limit is not None:
                used = _usage_tokens(result)
                if used is not None:  # a model response: its usage settles the estimate
                    current_step().used(tokens=used)
            return result

        # `type=Any`: the payload is JSON, and a fresh closure's annotations are not worth reading each time.
        result = await current_context().run(name, step, retry=config.get("retry"), timeout=config.get("timeout"),
                                             type=Any, limit=limit, tokens=config.get("tokens"))
        # Pydantic AI keeps the spans and metrics of replayed work out of its telemetry.
        record_durable_unit(executed=ran)
        return result
