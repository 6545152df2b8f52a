"""`run(agent, input)`: `agent.ainvoke` inside a handler, with LangGraph's interrupts as promises.

A human-in-the-loop pause (LangChain's `HumanInTheLoopMiddleware`, or `interrupt()` in a
tool) ends `ainvoke` with the interrupts in `"__interrupt__"`. Each one waits here on the
promise `langchain.interrupt:{n}` (n counts the interrupts this invocation has waited on,
from 1), whose value is what LangGraph's `Command(resume=...)` would carry; the agent is
then resumed with all the answers. While it waits the invocation is suspended and holds
nothing: after a restart the handler replays (model and tool calls come from the journal)
to the same interrupt, gets the answer from the journal, and goes on.

`true` approves every tool call a `HumanInTheLoopMiddleware` interrupt asks about, and
`false` rejects them. A rejected promise is told to the agent as LangChain's middleware expects a rejection: a
`reject` decision with the rejection's message, for each action a `HumanInTheLoopMiddleware`
interrupt asked about. For any other interrupt the rejection is raised (`PromiseRejected`).
"""

from __future__ import annotations

import uuid
import weakref
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from langgraph.types import Command

from journal.errors import JournalError
from runtime import Context, PromiseRejected, handler_context

PROMISE = "langchain.interrupt:"

# How many interrupts each invocation's handler has waited on: promise names in program order.
_waited: weakref.WeakKeyDictionary[Context, int] = weakref.WeakKeyDictionary()


async def run(agent: Pregel[Any, Any, Any, Any], input: Any, config: dict[str, Any] | None = None,
              **kwargs: Any) -> Any:
    """`await agent.ainvoke(input, config, **kwargs)` inside a handler, each interrupt answered by a promise.

    The agent needs a checkpointer to pause and resume (`create_agent(..., checkpointer=InMemorySaver())`
    is enough: the journal, not the checkpointer, is what survives a crash). Without a
    `thread_id` in `config` the run gets a thread of its own, dropped when it returns or
    suspends. Returns the agent's final state."""
    ctx = handler_context()
    if ctx is None:
        raise JournalError(
            "runtime.langchain.run was called outside a handler, where nothing would be journaled: call it from "
            "`async def handler(ctx, ...)` (Engine.run, journal run, a worker), or call agent.ainvoke to run the "
            "agent without durability"
        )
    saver = agent.checkpointer
    if not isinstance(saver, BaseCheckpointSaver):  # None, or True/False (a subgraph's "use the parent's")
        raise JournalError(
            "runtime.langchain.run needs an agent that can pause: build it with a checkpointer, e.g. "
            "create_agent(..., checkpointer=InMemorySaver()) (in memory is enough; the journal is what survives a crash)"
        )
    config = dict(config or {})
    given = config.get("configurable", {})
    # A thread of this execution's own: a replay in the same process (a worker resuming the
    # invocation) must not find the checkpoints its earlier execution left in memory.
    thread = given.get("thread_id") or f"journal:{ctx.invocation_id}:{uuid.uuid4().hex}"
    config["configurable"] = {**given, "thread_id": thread}
    try:
        ainvoke: Any = agent.ainvoke  # its overloads are by stream_mode, which `kwargs` may hold
        result = await ainvoke(input, config, **kwargs)
        while isinstance(result, dict) and result.get("__interrupt__"):
            answers: dict[str, Any] = {}
            for interrupt in result["__interrupt__"]:
                _waited[ctx] = number = _waited.get(ctx, 0) + 1
                try:
                    answers[interrupt.id] = _answer(interrupt.value, await ctx.promise(f"{PROMISE}{number}"))
                except PromiseRejected as exc:
                    answers[interrupt.id] = _rejection(interrupt.value, exc)
            result = await ainvoke(Command(resume=answers), config, **kwargs)
        return result
    finally:
        if "thread_id" not in given:  # ours: nobody will read it again
            await saver.adelete_thread(thread)


def _answer(asked: Any, value: Any) -> Any:
    """`true` or `false` as a human-in-the-loop middleware's decisions (approve or reject
    every call it asked about); any other value as it is."""
    if not isinstance(value, bool):
        return value
    decision = {"type": "approve"} if value else {"type": "reject"}
    if isinstance(asked, dict) and isinstance(asked.get("action_requests"), list):  # HITL, one turn's calls
        return {"decisions": [decision for _ in asked["action_requests"]]}
    if isinstance(asked, dict) and asked.get("type") == "tool_approval":  # HITL, one call at a time
        return decision
    return value


def _rejection(asked: Any, exc: PromiseRejected) -> Any:
    """A rejected promise as the interrupt's asker takes a rejection."""
    if isinstance(asked, dict) and isinstance(asked.get("action_requests"), list):  # HITL, one turn's calls
        return {"decisions": [{"type": "reject", "message": exc.reason} for _ in asked["action_requests"]]}
    if isinstance(asked, dict) and asked.get("type") == "tool_approval":  # HITL, one call at a time
        return {"type": "reject", "message": exc.reason}
    raise exc
