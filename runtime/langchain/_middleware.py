"""`JournalMiddleware`: a LangChain agent's model and tool calls as steps of the calling handler.

`create_agent` runs every model call through the middlewares' `awrap_model_call` and every
tool call through their `awrap_tool_call`, innermost last. This middleware runs the rest of
the call (`handler(request)`: the model, or the tool) inside `ctx.run`, journals what came
back as LangChain's own dict form of the messages, and rebuilds the messages from it, live
and on replay alike, so both runs hand the agent identical values.

- Model calls are steps named `langchain.model`; the tokens a streamed call yields reach
  the invocation's followers as chunks while the step runs (a configure hook adds a
  callback to the model's run inside the step, and only there). The token usage the model
  reports (`usage_metadata`) goes to `current_step().used`, so the budgets and, with
  `limit=`, the limit's token window count what was really used.
- Tool calls are steps named `langchain.tool:{tool}`, with the model's arguments for the
  call in the step's digest, so a replay checks the model asked for the same call. Calls the
  model makes together run in parallel, as LangGraph runs them; replay tells them apart by
  the task each one runs in, whatever order they finished in.
- A LangGraph `interrupt()` inside a tool ends the step with the interrupt's value journaled;
  the interrupt is raised again from handler code, live and on replay, for
  `runtime.langchain.run` to wait on as a promise. Once answered, LangGraph calls the tool
  again (its own rule for a resumed node) and that call is a step of its own, in which the
  tool's `interrupt()` returns the answer. A tool asks one question per call this way.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, message_to_dict, messages_from_dict
from langchain_core.tracers.context import register_configure_hook
from langchain_core.utils.utils import LC_ID_PREFIX
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt
from langsmith.utils import tracing_is_enabled
from pydantic import BaseModel

from journal.errors import JournalError
from runtime import Context, RetryPolicy, TerminalError, current_context, current_step, handler_context

MODEL_STEP = "langchain.model"
TOOL_STEP = "langchain.tool:"


class _Emit(AsyncCallbackHandler):
    """Sends each token a streamed model call yields to the step's followers."""

    # Awaited in turn rather than gathered: LangChain wraps a gathered handler's every
    # event (the model's start and end, each token) in a task of its own.
    run_inline = True

    def __init__(self) -> None:
        self.streamed = False

    async def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[Any]], *, run_id: UUID,
                                  **kwargs: Any) -> None:
        # Nothing to do at the start; but a handler without this method makes LangChain turn the
        # whole conversation into one string for `on_llm_start` on every model call (2.4 ms a
        # call at 600 messages: most of what a durable model call cost over a plain one).
        return None

    async def on_llm_new_token(self, token: str | list[str | dict[str, Any]], *, chunk: Any = None, run_id: UUID,
                               parent_run_id: UUID | None = None, tags: list[str] | None = None,
                               **kwargs: Any) -> None:
        text = token if isinstance(token, str) else "".join(
            b if isinstance(b, str) else str(b.get("text", "")) for b in token if isinstance(b, (str, dict)))
        self.streamed = True
        if text:
            current_step().emit(text)


# Set only while a model step runs: every callback manager LangChain configures in that
# step (the model's own run) then carries `_Emit`, and no other does.
_emitter: ContextVar[_Emit | None] = ContextVar("journal_langchain_emitter", default=None)
register_configure_hook(_emitter, True)


def _journaling(what: str) -> Context | None:
    """The handler's context to journal `what` in; None inside a step (which is journaled
    whole, nested agent included); an error outside any handler."""
    ctx = handler_context()
    if ctx is not None:
        return ctx
    try:
        current_context()
    except LookupError:
        raise JournalError(
            f"a LangChain agent with JournalMiddleware made {what} outside a journal handler, where nothing would "
            "be journaled: run the agent from `async def handler(ctx, ...)` (Engine.run, journal run, a worker), "
            "or build it without JournalMiddleware to run it without durability"
        ) from None
    return None


def _sync_refused(what: str) -> JournalError:
    return JournalError(
        f"a LangChain agent with JournalMiddleware made {what} synchronously (agent.invoke or agent.stream) inside "
        "a journal handler: a step is awaited on the handler's event loop, so run the agent with "
        "`await agent.ainvoke(...)`, `agent.astream(...)` or `await runtime.langchain.run(agent, ...)`"
    )


class JournalMiddleware(AgentMiddleware):
    """Makes a LangChain agent durable inside journal handlers:
    `create_agent(model, tools, middleware=[..., JournalMiddleware()])`, placed last so that
    it wraps the model and the tools most closely.

    Inside a handler every model call is a step named `langchain.model` and every tool call
    a step named `langchain.tool:{tool}`; after a crash the resumed handler's agent gets
    their journaled results back without calling the model or the tools again. Outside a
    handler the agent raises `JournalError` rather than run without durability.

    Args:
        limit: The store's limits (a name or a list, docs/limits.md) each attempt of a model
            call acquires, its tokens estimated from the request and settled by the usage the
            model reports. A replayed call acquires nothing.
        model_retry, tool_retry: The steps' `RetryPolicy` (default: the engine's).
    """

    def __init__(self, limit: str | Sequence[str] | None = None, *, model_retry: RetryPolicy | None = None,
                 tool_retry: RetryPolicy | None = None) -> None:
        super().__init__()
        self.limit = limit
        self._model_retry = model_retry
        self._tool_retry = tool_retry
        if not tracing_is_enabled():
            # `create_agent` hands each middleware's `awrap_*` hooks to LangSmith's `traceable`,
            # which, for a coroutine function, makes every call two round trips through a
            # thread pool even with tracing off (0.3-0.6 ms a call on a 2-core VM: more than
            # what the step's synced commit costs). Given a plain function instead it runs
            # inline; the function starts the hook in a task of its own, as LangSmith's
            # wrapper does, so the steps stand where they always stood in the journal.
            # Under tracing the hooks stay coroutine functions and keep their spans.
            vars(self).update(awrap_model_call=_in_task(self.awrap_model_call),
                              awrap_tool_call=_in_task(self.awrap_tool_call))

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]) -> ModelResponse[Any]:
        if _journaling("a model call") is not None:
            raise _sync_refused("a model call")
        return handler(request)

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]) -> ToolMessage | Command[Any]:
        if _journaling(f"a call of the tool {request.tool_call['name']!r}") is not None:
            raise _sync_refused("a tool call")
        return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        ctx = _journaling("a model call")
        if ctx is None:
            return await handler(request)

        async def step() -> Any:
            emit = _Emit()
            token = _emitter.set(emit)
            try:
                response = await handler(request)
            finally:
                _emitter.reset(token)
            if not emit.streamed:  # a streamed message keeps the id its chunks had (LangGraph pairs them by it)
                _name_messages(response)
            _report_usage(response)
            return _dump_response(response)

        limit = self.limit
        tokens = _estimate(request) if limit is not None else None
        # `inline`: `step` is a coroutine function, which runs on the loop anyway; said here, a
        # fresh closure each call is not inspected to find that out.
        done = await ctx.run(MODEL_STEP, step, retry=self._model_retry, type=Any, limit=limit, tokens=tokens,
                             inline=True)
        return _load_response(done, request)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        ctx = _journaling(f"a call of the tool {call['name']!r}")
        if ctx is None:
            return await handler(request)

        async def step(_: Any) -> Any:
            try:
                out = await handler(request)
            except GraphInterrupt as exc:
                # Not a failure: the tool waits for input. Journaled so that the replay raises it again.
                return {"interrupt": [i.value for i in exc.args[0]]}
            if not isinstance(out, ToolMessage):
                raise TerminalError(
                    f"the tool {call['name']!r} returned a LangGraph Command, which JournalMiddleware cannot journal: "
                    "return a value (or a ToolMessage) from a tool of a durable agent"
                )
            return {"message": message_to_dict(out)}

        # The model's arguments are the step's, so a replay checks the model asked for the same call.
        done = await ctx.run(TOOL_STEP + call["name"], step, call["args"], retry=self._tool_retry, type=Any,
                             inline=True)
        if "interrupt" in done:
            # Asked again from here, so the interrupt has this execution's id (the id LangGraph
            # matches a resume value by), not the id of the run that journaled it.
            for value in done["interrupt"]:
                interrupt(value)
        message = _load_message(done["message"])
        assert isinstance(message, ToolMessage)
        return message


def _in_task(hook: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Awaitable[Any]]:
    """`hook` as a plain function that runs each call in a task of its own (the task
    LangSmith's wrapper of a coroutine function would have run it in)."""
    def start(request: Any, handler: Any) -> Awaitable[Any]:
        return asyncio.get_running_loop().create_task(hook(request, handler))

    # LangSmith's wrapper reads the signature at every call: found here, it costs nothing.
    start.__signature__ = inspect.signature(hook)  # type: ignore[attr-defined]
    return start


def _report_usage(response: ModelResponse[Any] | AIMessage) -> None:
    """Give the step the tokens the model reported using (`usage_metadata`), for the budgets
    and the limit's token window; a model that reports none leaves the estimate standing."""
    messages = response.result if isinstance(response, ModelResponse) else [response]
    for message in messages:
        usage = message.usage_metadata if isinstance(message, AIMessage) else None
        if usage is not None and isinstance(usage.get("total_tokens"), int):
            current_step().used(tokens=usage["total_tokens"])


def _estimate(request: ModelRequest[Any]) -> int:
    """A model call's tokens, before it is made: its prompt (a token per 4 characters of the
    messages' JSON) and the completion it allows (`max_tokens`, else 1,000)."""
    system = request.system_message.content if request.system_message is not None else None
    text = json.dumps([system, [m.content for m in request.messages]], default=str)
    completion = request.model_settings.get("max_tokens") or getattr(request.model, "max_tokens", None) or 1000
    return len(text) // 4 + int(completion)


def _name_messages(response: ModelResponse[Any] | AIMessage) -> None:
    """Give each message LangChain named from its run id (a new uuid per call) an id made
    from the step's idempotency key instead: a call run again after a crash then answers
    with the same ids, and `check_determinism` compares like with like."""
    key = current_step().idempotency_key.rsplit(":", 1)[-1]
    messages = response.result if isinstance(response, ModelResponse) else [response]
    for n, message in enumerate(messages):
        if message.id is None or message.id.startswith(LC_ID_PREFIX):
            message.id = f"{LC_ID_PREFIX}journal-{key}-{n}"


def _dump_response(response: ModelResponse[Any] | AIMessage) -> dict[str, Any]:
    if isinstance(response, AIMessage):  # an inner middleware may answer with the message alone
        return {"messages": [message_to_dict(response)]}
    if not isinstance(response, ModelResponse):
        raise TerminalError(
            f"a middleware inside JournalMiddleware answered a model call with {type(response).__name__}, which "
            "cannot be journaled: put JournalMiddleware last in `middleware=[...]`"
        )
    dumped: dict[str, Any] = {"messages": [message_to_dict(m) for m in response.result]}
    structured = response.structured_response
    if structured is not None:
        dumped["structured"] = structured.model_dump(mode="json") if isinstance(structured, BaseModel) else structured
    return dumped


def _load_response(done: dict[str, Any], request: ModelRequest[Any]) -> ModelResponse[Any]:
    messages = [_load_message(m) for m in done["messages"]]
    structured = done.get("structured")
    schema = getattr(request.response_format, "schema", None)
    if structured is not None and isinstance(schema, type) and issubclass(schema, BaseModel):
        structured = schema.model_validate(structured)
    return ModelResponse(result=messages, structured_response=structured)


def _load_message(dumped: dict[str, Any]) -> BaseMessage:
    """A message from its journaled form (`message_to_dict`), as `messages_from_dict` builds
    it. That validates the fields again, at 25-35 us a message; a model or tool message
    whose fields are already what validation makes of them (a dump of a validated message
    is) is put together from them as they are instead, for a quarter of that."""
    data = dumped["data"]
    kind = dumped["type"]
    if kind == "ai" and _settled_ai(data):
        return AIMessage.model_construct(**data)
    if kind == "tool" and _settled_tool(data):
        return ToolMessage.model_construct(**data)
    return messages_from_dict([dumped])[0]


_CALL_KEYS = frozenset({"name", "args", "id", "type"})
_INVALID_CALL_KEYS = frozenset({"name", "args", "id", "error", "type"})


def _settled_content(content: Any) -> bool:
    return isinstance(content, str) or isinstance(content, list) and all(isinstance(c, (str, dict)) for c in content)


def _settled_ai(data: dict[str, Any]) -> bool:
    """Whether AIMessage's validation would leave `data` as it is: its tool calls in the
    shape it makes them (`create_tool_call`), none left to parse from `additional_kwargs`."""
    calls, invalid = data.get("tool_calls"), data.get("invalid_tool_calls")
    if not isinstance(calls, list) or not isinstance(invalid, list) or not _settled_content(data.get("content")):
        return False
    extra = data.get("additional_kwargs")
    if not isinstance(extra, dict) or not (calls or invalid) and extra.get("tool_calls"):
        return False
    return all(isinstance(c, dict) and c.keys() == _CALL_KEYS and c["type"] == "tool_call" for c in calls) and all(
        isinstance(c, dict) and c.keys() == _INVALID_CALL_KEYS and c["type"] == "invalid_tool_call" for c in invalid)


def _settled_tool(data: dict[str, Any]) -> bool:
    """Whether ToolMessage's validation would leave `data` as it is (it turns other contents
    and call ids into strings)."""
    return isinstance(data.get("tool_call_id"), str) and _settled_content(data.get("content"))
