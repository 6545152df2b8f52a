"""The agents the framework benchmarks run (`bench/_frameworks.py`): one Pydantic AI agent of
`TURNS` turns, each turn one model request and two tool calls, on Pydantic AI's own
`FunctionModel`, built plain, with `JournalDurability` or with `DBOSDurability`; and a step
that streams chunks stamped with the time they were sent.

A module of its own so that the processes the benchmarks start (the resumed run, the DBOS
run, the emitter) import the very same agents."""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

TURNS = 200
LIMITS = UsageLimits(request_limit=None)  # (Pydantic AI stops a run at 50 requests by default)
AT = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    if turn < TURNS:
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": f"{turn}-a"}, tool_call_id=f"{turn}-a"),
                                    ToolCallPart("lookup", {"q": f"{turn}-b"}, tool_call_id=f"{turn}-b")],
                             timestamp=AT)
    live = os.environ.get("BENCH_LIVE_MARK")
    if live:  # the resumed run is live again: say when, then wait to be killed or released
        with open(live, "w") as f:
            f.write(repr(time.time()))
        hold = os.environ.get("BENCH_HOLD")
        while hold and not os.path.exists(hold):
            time.sleep(0.001)
    return ModelResponse(parts=[TextPart(f"done after {turn} turns")], timestamp=AT)


def lookup(q: str) -> str:
    return f"found {q}"


def agent(kind: str) -> Agent[None, str]:
    """The agent, plain (`plain`), on journal (`journal`) or on DBOS (`dbos`)."""
    if kind == "plain":
        return Agent(FunctionModel(_model), name="bench", tools=[lookup])
    if kind == "journal":
        from runtime.pydantic_ai import JournalDurability

        return Agent(FunctionModel(_model), name="bench", tools=[lookup], capabilities=[JournalDurability()])
    from dbos import DBOS
    from pydantic_ai.durable_exec.dbos import DBOSDurability

    # DBOS journals a function tool only when it is a DBOS step, so the tool is one.
    return Agent(FunctionModel(_model), name="bench_dbos", tools=[DBOS.step()(lookup)],
                 capabilities=[DBOSDurability()])


_journal_agent: Agent[None, str] | None = None


async def journal_turns(ctx: Any, prompt: str) -> str:
    """The handler: one durable run of the agent, `TURNS` turns."""
    global _journal_agent
    if _journal_agent is None:
        _journal_agent = agent("journal")
    return (await _journal_agent.run(prompt, usage_limits=LIMITS)).output


async def stamped_chunks(ctx: Any, args: dict[str, Any]) -> int:
    """A step that emits `args["chunks"]` chunks, each the time it was sent, `args["gap"]` s apart."""
    from runtime import current_step

    async def step() -> int:
        import anyio

        emit = current_step().emit
        for _ in range(args["chunks"]):
            emit(repr(time.time()))
            await anyio.sleep(args["gap"])  # the model's time between tokens
        return args["chunks"]

    result: int = await ctx.run("stream", step)
    return result
