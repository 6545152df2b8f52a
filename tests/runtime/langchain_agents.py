"""LangChain agents for tests/runtime/test_langchain.py: `create_agent` over a scripted
`GenericFakeChatModel` and tools that log each call to the file `$JOURNAL_TEST_LOG`, so a
test counts what really ran, across processes."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import interrupt

import runtime.langchain
from runtime import Context, RetryPolicy
from runtime.langchain import JournalMiddleware

LOG = "JOURNAL_TEST_LOG"
RELEASE = "JOURNAL_TEST_RELEASE"  # a file the tool `hotels` waits for, when set


def _log(line: str) -> None:
    path = os.environ.get(LOG)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering by how far the conversation has got (the
    number of tool results so far), so a fresh process after a crash answers the same."""

    script: list[AIMessage]

    def __init__(self, script: list[AIMessage], **kwargs: Any) -> None:
        super().__init__(messages=iter(()), script=script, **kwargs)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        _log(f"model {turn}")
        reply = self.script[turn]
        if any(isinstance(m, ToolMessage) and m.status == "error" for m in messages):
            reply = AIMessage(content="Stopped: " + " | ".join(str(m.content) for m in messages
                                                                 if isinstance(m, ToolMessage)))
        return ChatResult(generations=[ChatGeneration(message=reply.model_copy())])


def _call(name: str, args: dict[str, Any], id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": id, "type": "tool_call"}


USAGE = {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42}


@tool
def flights(city: str) -> str:
    """Find a flight to a city."""
    _log(f"tool flights {city}")
    return f"LH123 to {city}"


@tool
def hotels(city: str) -> str:
    """Find a hotel in a city."""
    _log(f"tool hotels {city} started")
    release = os.environ.get(RELEASE)
    if release:  # held until the test lets it finish (the run is killed meanwhile)
        while not Path(release).exists():
            time.sleep(0.01)
    _log(f"tool hotels {city} done")
    return f"Hotel Astoria in {city}"


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    _log(f"tool weather {city}")
    return f"sunny in {city}"


TRIP = [
    AIMessage(content="", tool_calls=[_call("flights", {"city": "Oslo"}, "c1")], usage_metadata=USAGE),
    # The parallel pair: LangGraph runs both tool calls at once.
    # `hotels` (first) is held until `weather` (second) has run: one after the other, they never end.
    AIMessage(content="", tool_calls=[_call("hotels", {"city": "Oslo"}, "c2"), _call("weather", {"city": "Oslo"}, "c3")],
              usage_metadata=USAGE),
    AIMessage(content="Trip: LH123 to Oslo, Hotel Astoria in Oslo, sunny in Oslo", usage_metadata=USAGE),
]

trip_agent = create_agent(ScriptedModel(TRIP), [flights, weather, hotels], middleware=[JournalMiddleware()])


def _ask(question: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": question}]}


async def trip_handler(ctx: Context, question: str) -> str:
    state = await trip_agent.ainvoke(_ask(question))
    return str(state["messages"][-1].content)


@tool
def transfer(amount: int) -> str:
    """Transfer money."""
    _log(f"tool transfer {amount}")
    return f"transferred {amount}"


PAY = [
    AIMessage(content="", tool_calls=[_call("transfer", {"amount": 250}, "t1")]),
    AIMessage(content="Paid."),
]


class _Echo(ScriptedModel):
    """Ends by quoting the tool's result (an approval's rejection message included)."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        last = messages[-1]
        if isinstance(last, ToolMessage):
            result.generations[0].message.content = f"Result: {last.content}"
        return result


pay_agent = create_agent(_Echo(PAY), [transfer], checkpointer=InMemorySaver(),
                         middleware=[HumanInTheLoopMiddleware(interrupt_on={"transfer": True}), JournalMiddleware()])


async def pay_handler(ctx: Context, question: str) -> str:
    state = await runtime.langchain.run(pay_agent, _ask(question))
    return str(state["messages"][-1].content)


@tool
def delete(path: str) -> str:
    """Delete a file, once a person agrees."""
    _log(f"tool delete {path} asked")
    answer = interrupt({"question": f"delete {path}?"})
    _log(f"tool delete {path} answered {answer}")
    return f"deleted {path}" if answer == "yes" else f"kept {path}"


DELETE = [
    AIMessage(content="", tool_calls=[_call("delete", {"path": "/tmp/x"}, "d1")]),
    AIMessage(content="Done."),
]

delete_agent = create_agent(_Echo(DELETE), [delete], checkpointer=InMemorySaver(), middleware=[JournalMiddleware()])


async def delete_handler(ctx: Context, question: str) -> str:
    state = await runtime.langchain.run(delete_agent, _ask(question))
    return str(state["messages"][-1].content)


STORY = [AIMessage(content="Once upon a time in Oslo")]
story_agent = create_agent(ScriptedModel(STORY), [], middleware=[JournalMiddleware()])


async def story_handler(ctx: Context, question: str) -> str:
    """Streams the agent (`stream_mode="messages"`), so that the model streams its tokens."""
    text = ""
    async for chunk, _ in story_agent.astream(_ask(question), stream_mode="messages"):
        if isinstance(chunk, AIMessage):
            text += str(chunk.content)
    return text


BROKEN: list[bool] = []


class FlakyStreamer(ScriptedModel):
    """Streams three tokens and then fails, on its first call since `BROKEN` was cleared."""

    def _stream(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                **kwargs: Any) -> Any:
        for n, chunk in enumerate(super()._stream(messages, stop, run_manager, **kwargs)):
            if n == 3 and not BROKEN:
                BROKEN.append(True)
                raise ConnectionError("the stream broke")
            yield chunk


flaky_agent = create_agent(FlakyStreamer(STORY), [], middleware=[
    JournalMiddleware(model_retry=RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=0))])


async def flaky_story_handler(ctx: Context, question: str) -> str:
    """Streams, and answers with the final state's last message (the stream holds the broken attempt's tokens too)."""
    last: Any = None
    async for mode, data in flaky_agent.astream(_ask(question), stream_mode=["messages", "values"]):
        if mode == "values":
            last = data
    return str(last["messages"][-1].content)


async def sync_handler(ctx: Context, question: str) -> str:
    """Runs the agent synchronously, which a handler cannot journal."""
    state = trip_agent.invoke(_ask(question))
    return str(state["messages"][-1].content)
