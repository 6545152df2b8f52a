"""Model calls as steps: the SDK's `Model` and `ModelProvider` interfaces, wrapped.

`JournaledProvider` stands in for the run's model provider and hands out `JournaledModel`s;
each `get_response` is one step, journaled as the JSON form of the SDK's `ModelResponse`
and rebuilt from it, live and on replay alike. The SDK's own retries of a failed request
stay the SDK's: each try is a step of its own.

The JSON form keeps every field, None ones included: the SDK declares some of them required
and nullable (`response_id`, None from every Chat Completions model), so a form that left
out the Nones could not be rebuilt. Journals written before kept only the fields that were
not None; they are rebuilt with None for each field missing (`_rebuilt`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents.items import ModelResponse, TResponseStreamEvent
from agents.models.interface import Model, ModelProvider
from pydantic import TypeAdapter, ValidationError

from runtime import RetryPolicy, current_step, handler_context

_RESPONSE = TypeAdapter(ModelResponse)


class JournaledModel(Model):
    """`model`'s calls as steps named `openai_agents.model:{label}`."""

    def __init__(self, model: Model, label: str, retry: RetryPolicy | None,
                 limit: str | list[str] | None = None) -> None:
        self.model = model
        self.label = label
        self._retry = retry
        self._limit = limit

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        ctx = handler_context()
        if ctx is None:  # a nested run inside a tool's step: that step is journaled
            return await self.model.get_response(*args, **kwargs)

        limit = self._limit

        async def step() -> Any:
            response = await self.model.get_response(*args, **kwargs)
            if limit is not None:  # its real usage settles the estimate
                current_step().used(tokens=int(response.usage.total_tokens or 0))
            return _RESPONSE.dump_python(response, mode="json", by_alias=True)

        tokens = estimate(args, kwargs) if limit is not None else None
        return _rebuilt(await ctx.run(f"openai_agents.model:{self.label}", step, retry=self._retry, type=Any,
                                      limit=limit, tokens=tokens))

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        if handler_context() is not None:
            raise RuntimeError(
                "a streamed run (Runner.run_streamed) is not journaled: use runtime.openai_agents.run, "
                "which makes every model call a step"
            )
        return self.model.stream_response(*args, **kwargs)

    def get_retry_advice(self, request: Any) -> Any:
        return self.model.get_retry_advice(request)

    async def close(self) -> None:
        await self.model.close()


def estimate(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """A model request's tokens, before it is sent: its instructions and input (a token per 4
    characters of their JSON) and the completion it allows (`max_tokens`, else 1,000)."""
    names = ("system_instructions", "input", "model_settings")
    given = dict(zip(names, args, strict=False)) | {k: v for k, v in kwargs.items() if k in names}
    text = json.dumps([given.get("system_instructions"), given.get("input")], default=str)
    settings = given.get("model_settings")
    completion = getattr(settings, "max_tokens", None) or 1000
    return len(text) // 4 + int(completion)


class JournaledProvider(ModelProvider):
    """The run's model provider, whose models' calls are steps."""

    def __init__(self, provider: ModelProvider, retry: RetryPolicy | None,
                 limit: str | list[str] | None = None) -> None:
        self.provider = provider
        self._retry = retry
        self._limit = limit

    def get_model(self, model_name: str | None) -> Model:
        model = self.provider.get_model(model_name)
        return model if isinstance(model, JournaledModel) else JournaledModel(model, model_name or "default",
                                                                              self._retry, self._limit)

    async def aclose(self) -> None:
        await self.provider.aclose()


def _rebuilt(data: Any) -> ModelResponse:
    """The `ModelResponse` journaled as `data`. A journal written before every field was kept
    lacks the fields that were None: each one missing is given None, once, and the rest of
    the check is pydantic's (a field that may not be None is still refused)."""
    try:
        return _RESPONSE.validate_python(data)
    except ValidationError as exc:
        missing = [error["loc"] for error in exc.errors() if error["type"] == "missing"]
        if not missing or not isinstance(data, dict):
            raise
    for loc in missing:
        _put_none(data, loc)
    return _RESPONSE.validate_python(data)


def _put_none(data: Any, loc: tuple[int | str, ...]) -> None:
    *path, field = loc
    for key in path:
        data = data[key]
    data[field] = None
