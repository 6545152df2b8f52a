"""What `runtime.langchain.JournalMiddleware` and `runtime.adk.JournalPlugin` add per durable
operation, against one synced LMDB commit measured in the same repetition.

    python -m bench.agent_middlewares [--turns 50] [--reps 5]

Each framework runs an agent of `--turns` turns (a turn is one model call and two tool calls
the model asks for together, on the framework's own fake or a `BaseLlm` subclass), plain and
then durably inside a handler (LMDB, `sync` durability), and plain again, back to back in one
process. "Added per operation" is the durable run's time less the mean of its plain
neighbours, over its durable operations (`3 * turns + 1`). The synced commit is a raw LMDB
put, commit and fsync (`bench/_raw.py::fsynced_commit_us`), taken before and after.
Medians over the repetitions; the machine is shared, so read the figures as noisy. Two
columns hold up better under load, as they count work rather than time: the CPU time the
durable run adds per operation (the process's, every thread), and the turns of the event
loop it adds per operation (each a hand-off: a task started or woken, a thread's reply).

The same engine then runs bare `ctx.run` steps in the agent's shape (per turn one step, then
two together; `3 * turns + 1` in all, results of the size the integrations journal): what
the runtime's step costs by itself, commit and fsync included. "Beyond bare steps" is the
added time less that, the integration's own part; "fsyncs/op" counts the durable run's
fsyncs (the two tool calls of a turn share one).
"Over a pass-through" (LangChain) is the durable run's time less that of the same agent with
a middleware whose `async def` hooks only call on, as LangChain documents hooks: what a
middleware written that way pays before it does anything (LangSmith's wrapper runs each
such hook through a thread pool, about 150 µs an operation here), so a yardstick for
middleware-based integrations that cannot run here (Restate's `ext/langchain`).
`JournalMiddleware` hands LangChain plain functions instead, and a pass-through written
that way costs nothing measurable over no middleware: its honest figure is "added/op".
Restate's and Temporal's integrations of the same frameworks need their servers, which do
not install here: not measured.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from . import _raw

Built = tuple[Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[Any]], Callable[[], Awaitable[Any]] | None]


def _langchain(turns: int) -> Built:
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    from runtime.langchain import JournalMiddleware

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Model:
            return self

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            turn = sum(isinstance(m, AIMessage) for m in messages)
            if turn < turns:
                calls = [{"name": "lookup", "args": {"q": f"{turn}-{s}"}, "id": f"{turn}-{s}", "type": "tool_call"}
                         for s in "ab"]
                reply = AIMessage(content="", tool_calls=calls)
            else:
                reply = AIMessage(content=f"done after {turn} turns")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    @tool
    async def lookup(q: str) -> str:
        """Look something up."""
        return q

    class PassThrough(AgentMiddleware):
        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

    config = {"recursion_limit": 2 * turns + 10}
    question = {"messages": [{"role": "user", "content": "go"}]}
    plain = create_agent(Model(messages=iter(())), [lookup])
    passing = create_agent(Model(messages=iter(())), [lookup], middleware=[PassThrough()])
    durable = create_agent(Model(messages=iter(())), [lookup], middleware=[JournalMiddleware()])

    async def run_plain() -> Any:
        return await plain.ainvoke(question, config)  # type: ignore[arg-type]

    async def run_passing() -> Any:
        return await passing.ainvoke(question, config)  # type: ignore[arg-type]

    async def handler(ctx: Any) -> str:
        state = await durable.ainvoke(question, config)  # type: ignore[arg-type]
        return str(state["messages"][-1].content)

    return run_plain, handler, run_passing


def _adk(turns: int) -> Built:
    from collections.abc import AsyncGenerator

    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from runtime.adk import JournalPlugin

    class Model(BaseLlm):
        async def generate_content_async(self, llm_request: LlmRequest,
                                         stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
            turn = sum(c.role == "model" for c in llm_request.contents)
            if turn < turns:
                parts = [types.Part(function_call=types.FunctionCall(name="lookup", args={"q": f"{turn}-{s}"}))
                         for s in "ab"]
            else:
                parts = [types.Part(text=f"done after {turn} turns")]
            yield LlmResponse(content=types.Content(role="model", parts=parts))

    async def lookup(q: str) -> str:
        """Look something up."""
        return q

    def app(plugins: list[Any]) -> App:
        return App(name="bench", root_agent=LlmAgent(name="agent", model=Model(model="fake"), tools=[lookup]),
                   plugins=plugins)

    plain_app, durable_app = app([]), app([JournalPlugin()])

    async def run(on: App) -> str:
        sessions = InMemorySessionService()
        await sessions.create_session(app_name="bench", user_id="u", session_id="s")
        text = ""
        async for event in Runner(app=on, session_service=sessions).run_async(
                user_id="u", session_id="s", new_message=types.Content(role="user", parts=[types.Part(text="go")])):
            if event.is_final_response() and event.content and event.content.parts and event.content.parts[0].text:
                text = event.content.parts[0].text
        return text

    async def run_plain() -> Any:
        return await run(plain_app)

    async def handler(ctx: Any) -> str:
        return await run(durable_app)

    return run_plain, handler, None


def _bare_steps(turns: int) -> Callable[[Any], Awaitable[Any]]:
    """A handler making bare steps in the agents' shape: per turn one step (the model call),
    then two at once (the tool calls), and a last one (the final answer)."""

    async def model() -> dict[str, Any]:
        return {"messages": [{"type": "ai", "data": {"content": "", "tool_calls": [
            {"name": "lookup", "args": {"q": "0-a"}, "id": "0-a", "type": "tool_call"}]}}]}

    async def tool(q: str) -> dict[str, Any]:
        return {"message": {"type": "tool", "data": {"content": q, "tool_call_id": q}}}

    async def handler(ctx: Any) -> str:
        for turn in range(turns):
            await ctx.run("model", model, type=Any, inline=True)
            await asyncio.gather(*(ctx.run("tool", tool, f"{turn}-{s}", type=Any, inline=True) for s in "ab"))
        await ctx.run("model", model, type=Any, inline=True)
        return "done"

    return handler


_turns = [0]  # turns of the event loop so far


def _count_turns() -> None:
    """Count the event loop's turns (asyncio's `_run_once`, one per pass over what is ready)."""
    loop_class: Any = asyncio.base_events.BaseEventLoop
    run_once = loop_class._run_once

    def counted(self: Any) -> None:
        _turns[0] += 1
        run_once(self)

    loop_class._run_once = counted


async def _timed(run: Callable[[], Awaitable[Any]]) -> tuple[Any, tuple[float, float, int]]:
    """What `run()` returned, and the wall time, CPU time and loop turns it took."""
    turns, cpu, started = _turns[0], time.process_time(), time.perf_counter()
    out = await run()
    return out, (time.perf_counter() - started, time.process_time() - cpu, _turns[0] - turns)


async def _one(build: Callable[[int], Built], turns: int, db: str,
               ) -> tuple[tuple[float, ...], tuple[float, ...], float, int, float | None]:
    """(wall, CPU, loop turns) of the plain run (the mean of the two around the durable one)
    and of the durable run; the wall time of the bare steps; the durable run's fsyncs; the
    wall time of the run with a pass-through middleware, where the framework has one."""
    from runtime import Engine

    run_plain, handler, run_passing = build(turns)
    await run_plain()  # warm: imports, first-call caches
    passing = None
    if run_passing is not None:
        await run_passing()
        passing = (await _timed(run_passing))[1][0]
    _, before = await _timed(run_plain)
    async with Engine.open(db, durability="sync") as engine:
        fsyncs = engine.committer.batches
        out, durable = await _timed(lambda: engine.run(handler, id="turns"))
        fsyncs = engine.committer.batches - fsyncs
        bare = _bare_steps(turns)
        await engine.run(bare, id="bare-warm", input=None)  # its first run pays its imports
        done, steps = await _timed(lambda: engine.run(bare, id="bare"))
    assert out.status == "completed" and out.result == f"done after {turns} turns", out
    assert done.status == "completed", done
    _, after = await _timed(run_plain)
    return tuple((b + a) / 2 for b, a in zip(before, after, strict=True)), durable, steps[0], fsyncs, passing


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    logging.getLogger("google_adk").setLevel(logging.ERROR)  # a line per model call without usage
    _count_turns()
    operations = 3 * args.turns + 1
    rows = []
    for name, build in (("LangChain JournalMiddleware", _langchain), ("ADK JournalPlugin", _adk)):
        added, commits, plains, cpus, turns, beyond, fsyncs, over = [], [], [], [], [], [], [], []
        for _ in range(args.reps):
            parent = tempfile.mkdtemp(prefix="bench-mw-")
            before = _raw.fsynced_commit_us(parent=parent)
            plain, durable, bare, synced, passing = anyio.run(_one, build, args.turns, parent + "/db")
            after = _raw.fsynced_commit_us(parent=parent)
            commits.append((before + after) / 2)
            added.append((durable[0] - plain[0]) / operations * 1e6)
            plains.append(plain[0] / operations * 1e6)
            cpus.append((durable[1] - plain[1]) / operations * 1e6)
            turns.append((durable[2] - plain[2]) / operations)
            beyond.append((durable[0] - plain[0] - bare) / operations * 1e6)
            fsyncs.append(synced / operations)
            if passing is not None:
                over.append((durable[0] - passing) / operations * 1e6 / commits[-1])
        ratios = [a / c for a, c in zip(added, commits, strict=True)]
        rows.append((name, statistics.median(plains), statistics.median(added), statistics.median(commits),
                     statistics.median(ratios), statistics.median(over) if over else None,
                     statistics.median(cpus), statistics.median(turns), statistics.median(beyond),
                     statistics.median(fsyncs)))
    print(f"{args.turns} turns ({operations} durable operations a run), {args.reps} repetitions, medians:")
    print(f"{'integration':<28} {'plain/op':>10} {'added/op':>10} {'synced commit':>14} {'added/commit':>13} "
          f"{'over a pass-through':>20} {'added CPU/op':>13} {'added turns/op':>15} {'beyond bare steps/op':>21} "
          f"{'fsyncs/op':>10}")
    for name, plain, add, commit, ratio, over_passing, cpu, turn, past, synced in rows:
        passing = f"{over_passing:>19.2f}x" if over_passing is not None else f"{'-':>20}"
        print(f"{name:<28} {plain:>8.0f}us {add:>8.0f}us {commit:>12.0f}us {ratio:>12.2f}x {passing} "
              f"{cpu:>11.0f}us {turn:>15.1f} {past:>19.0f}us {synced:>10.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
