"""`JournalPlugin`: an ADK runner's model and tool calls as steps of the calling handler.

ADK asks every plugin before each model call (`before_model_callback`) and before each
tool call (`before_tool_callback`), and takes a plugin's answer instead of making the call.
This plugin answers by making the call itself inside `ctx.run`: the model's `LlmResponse`
and the tool's result are journaled (as their JSON forms) and handed to ADK, live and on
replay alike.

- Model calls are steps named `adk.model:{agent}`. Function calls the model leaves without
  an id get one made from the step's idempotency key (ADK would draw a random one), so a
  replay names every call as the first run did. With `StreamingMode.SSE` the model streams
  inside the step and its text reaches the invocation's followers as chunks. The token
  usage the model reports (`usage_metadata`) goes to `current_step().used`, so the budgets
  and, with `limit=`, the limit's token window count what was really used.
- Tool calls are steps named `adk.tool:{tool}`, the model's arguments in the step's digest.
  What the tool did to the session besides answering (its `state` changes, a transfer, an
  escalation) is journaled with its result and done again on replay, so the session ADK
  rebuilds by replaying matches the one the first run had.
- A tool that asks for confirmation (`FunctionTool(require_confirmation=...)`, or
  `tool_context.request_confirmation`) waits on the promise `adk.confirm:{tool}:{call id}`
  instead of ending the run; its answer becomes the call's `ToolConfirmation`, and the tool
  is called again (a step of its own) to act on it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.run_config import StreamingMode  # type: ignore[attr-defined]
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.adk.tools.tool_context import ToolContext

from journal.errors import JournalError
from runtime import Context, PromiseRejected, RetryPolicy, current_context, current_step, handler_context

MODEL_STEP = "adk.model:"
TOOL_STEP = "adk.tool:"
PROMISE = "adk.confirm:"


def _journaling(what: str) -> Context | None:
    """The handler's context to journal `what` in; None inside a step (journaled whole); an
    error outside any handler."""
    ctx = handler_context()
    if ctx is not None:
        return ctx
    try:
        current_context()
    except LookupError:
        raise JournalError(
            f"an ADK runner with JournalPlugin made {what} outside a journal handler, where nothing would be "
            "journaled: run it from `async def handler(ctx, ...)` (Engine.run, journal run, a worker), or leave "
            "JournalPlugin out to run it without durability"
        ) from None
    return None


class JournalPlugin(BasePlugin):
    """Makes an ADK runner durable inside journal handlers: `App(..., plugins=[JournalPlugin()])`
    (or ADK 2's deprecated `Runner(..., plugins=[JournalPlugin()])`).

    Inside a handler every model call is a step named `adk.model:{agent}` and every tool
    call a step named `adk.tool:{tool}`; after a crash the resumed handler replays the run
    without calling the model or the tools again. A tool's request for confirmation waits
    on the promise `adk.confirm:{tool}:{call id}`. Outside a handler a call raises
    `JournalError` rather than run without durability.

    The plugin answers the model and tool calls itself, so ADK skips the agents' own
    before/after model and tool callbacks for them (its rule for a plugin's answer);
    plugins listed before this one still see and shape each request.

    Args:
        limit: The store's limits (a name or a list, docs/limits.md) each attempt of a model
            call acquires, its tokens estimated from the request and settled by the usage the
            model reports. A replayed call acquires nothing.
        model_retry, tool_retry: The steps' `RetryPolicy` (default: the engine's).
    """

    def __init__(self, limit: str | Sequence[str] | None = None, *, model_retry: RetryPolicy | None = None,
                 tool_retry: RetryPolicy | None = None, name: str = "journal") -> None:
        super().__init__(name)
        self.limit = limit
        self._model_retry = model_retry
        self._tool_retry = tool_retry

    async def before_model_callback(self, *, callback_context: CallbackContext,
                                    llm_request: LlmRequest) -> LlmResponse | None:
        agent = callback_context.get_invocation_context().agent
        if agent is None:
            return None  # not an agent's call: nothing of ours
        ctx = _journaling(f"a model call of the agent {agent.name!r}")
        if ctx is None:
            return None  # inside a step: ADK calls the model, as part of that step
        llm = getattr(agent, "canonical_model", None)
        if llm is None:
            return None  # not an LLM agent: nothing to call
        run_config = callback_context.run_config
        stream = run_config is not None and run_config.streaming_mode == StreamingMode.SSE

        async def step() -> Any:
            final: LlmResponse | None = None
            async for response in llm.generate_content_async(llm_request, stream=stream):
                if response.partial:
                    text = "".join(p.text for p in (response.content.parts or []) if p.text and not p.thought) \
                        if response.content else ""
                    if text:
                        current_step().emit(text)
                else:
                    final = response
            if final is None:
                raise JournalError(f"the model of the agent {agent.name!r} answered nothing but partial responses")
            _name_calls(final)
            _report_usage(final)
            return final.model_dump(mode="json", exclude_none=True)

        limit = self.limit
        tokens = _estimate(llm_request) if limit is not None else None
        done = await ctx.run(f"{MODEL_STEP}{agent.name}", step, retry=self._model_retry, type=Any,
                             limit=limit, tokens=tokens)
        return LlmResponse.model_validate(done)

    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        ctx = _journaling(f"a call of the tool {tool.name!r}")
        if ctx is None:
            return None
        done = await self._call(ctx, tool, tool_args, tool_context)
        asked = done.get("confirm")
        if asked is not None:
            # Asked here rather than by ending the run: the promise holds the run, suspended.
            tool_context.actions.requested_tool_confirmations.pop(tool_context.function_call_id or "", None)
            tool_context.actions.skip_summarization = None
            try:
                answer = await ctx.promise(f"{PROMISE}{tool.name}:{tool_context.function_call_id}")
            except PromiseRejected:
                answer = False
            tool_context.tool_confirmation = _confirmation(answer, asked)
            done = await self._call(ctx, tool, tool_args, tool_context)
        _redo(done, tool_context)
        response: dict[str, Any] = done["response"]
        return response

    async def _call(self, ctx: Context, tool: BaseTool, tool_args: dict[str, Any],
                    tool_context: ToolContext) -> dict[str, Any]:
        async def step(_: Any) -> Any:
            before = dict(tool_context.state.to_dict())
            result = await tool.run_async(args=tool_args, tool_context=tool_context)
            done: dict[str, Any] = {"response": result if isinstance(result, dict) else {"result": result}}
            after = tool_context.state.to_dict()
            if changed := {k: v for k, v in after.items() if k not in before or before[k] != v}:
                done["state"] = changed
            actions = tool_context.actions
            asked = actions.requested_tool_confirmations.get(tool_context.function_call_id or "")
            if asked is not None:
                done["confirm"] = asked.model_dump(mode="json", exclude_none=True)
            for field in ("transfer_to_agent", "escalate", "skip_summarization"):
                if getattr(actions, field) is not None:
                    done[field] = getattr(actions, field)
            return done

        # The model's arguments are the step's, so a replay checks the model asked for the same call.
        done: dict[str, Any] = await ctx.run(f"{TOOL_STEP}{tool.name}", step, tool_args, retry=self._tool_retry,
                                             type=Any)
        return done


def _report_usage(response: LlmResponse) -> None:
    """Give the step the tokens the model reported using (`usage_metadata`), for the budgets
    and the limit's token window; a model that reports none leaves the estimate standing."""
    usage = response.usage_metadata
    if usage is None:
        return
    total = usage.total_token_count
    if total is None and (usage.prompt_token_count is not None or usage.candidates_token_count is not None):
        total = (usage.prompt_token_count or 0) + (usage.candidates_token_count or 0)
    if total is not None:
        current_step().used(tokens=total)


def _estimate(request: LlmRequest) -> int:
    """A model call's tokens, before it is made: its prompt (a token per 4 characters of the
    contents' and instructions' JSON) and the completion it allows (`max_output_tokens`, else 1,000)."""
    config = request.config
    system = config.system_instruction if config is not None else None
    text = json.dumps([str(system) if system is not None else None,
                       [c.model_dump(mode="json", exclude_none=True) for c in request.contents]])
    completion = (config.max_output_tokens if config is not None else None) or 1000
    return len(text) // 4 + int(completion)


def _name_calls(response: LlmResponse) -> None:
    """Give each function call without an id one the replay will give it too (ADK's own are
    random); `adk-` marks it as ADK's, which ADK keeps from the model."""
    key = current_step().idempotency_key.rsplit(":", 1)[-1]
    parts = response.content.parts or [] if response.content else []
    calls = [p.function_call for p in parts if p.function_call is not None]
    for n, call in enumerate(calls):
        if not call.id:
            call.id = f"adk-journal-{key}-{n}"


def _confirmation(answer: Any, asked: dict[str, Any]) -> ToolConfirmation:
    """A promise's value as the tool's `ToolConfirmation`: `true`/`false`, or ADK's own shape
    (`{"confirmed": true, "payload": ...}`)."""
    if isinstance(answer, dict):
        return ToolConfirmation(hint=asked.get("hint", ""), confirmed=answer.get("confirmed") is True,
                                payload=answer.get("payload"))
    return ToolConfirmation(hint=asked.get("hint", ""), confirmed=answer is True)


def _redo(done: dict[str, Any], tool_context: ToolContext) -> None:
    """What the tool did to the session besides answering, done again (a no-op change live)."""
    for key, value in done.get("state", {}).items():
        tool_context.state[key] = value
    for field in ("transfer_to_agent", "escalate", "skip_summarization"):
        if field in done:
            setattr(tool_context.actions, field, done[field])
