"""A small chat-completions client for the examples, with an offline stand-in.

`chat_model()` returns an `OpenAIChat` when an OpenAI-compatible endpoint is configured
(`OPENAI_BASE_URL` and/or `OPENAI_API_KEY`; the model from `OPENAI_MODEL`), and the
`ScriptedModel` otherwise, so every example runs without a network or a key.

Call a model only inside a step, so that its answer is journaled and a replay after a
crash does not pay for it again:

    reply = await ctx.run("think", model.complete, messages)

`OpenAIChat.complete` sends `runtime.current_step().idempotency_key` as the
`Idempotency-Key` header. The key is the same for every retry of the step and after a
crash, so a provider (or a gateway in front of it) that honours the header can recognise
a repeated request. Only the standard library is used (urllib).

Environment:
    OPENAI_BASE_URL   e.g. https://api.openai.com/v1 or http://localhost:11434/v1
    OPENAI_API_KEY    sent as `Authorization: Bearer ...` when set
    OPENAI_MODEL      the model name (default gpt-4o-mini)
    EXAMPLE_LLM       `scripted` forces the offline model even when the above are set
    EXAMPLE_LATENCY   seconds the offline model and tools pretend to work (default 0)
    EXAMPLE_CALL_LOG  a file to which every paid call appends one line (see `record_call`)
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from runtime import TerminalError, current_step

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"


class Reply(msgspec.Struct):
    """What a model answered. Journaled as the step's result, so replay returns the same one."""

    content: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class TransientHTTPError(Exception):
    """A status worth retrying (429, 5xx): the step's RetryPolicy tries again, same Idempotency-Key."""


def record_call(detail: str = "") -> None:
    """Append `<idempotency key> <step name> <detail>` to $EXAMPLE_CALL_LOG, if set.

    Each line stands for work that cost something. After a crash and a resume, a step
    that had finished before the crash has exactly one line: the replay did not redo it.
    """
    path = os.environ.get("EXAMPLE_CALL_LOG")
    if not path:
        return
    step = current_step()
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{step.idempotency_key} {step.name} {detail}".rstrip() + "\n")
        f.flush()
        os.fsync(f.fileno())


async def simulated_latency() -> None:
    """Pretend to wait on a network for $EXAMPLE_LATENCY seconds (without blocking other steps)."""
    seconds = float(os.environ.get("EXAMPLE_LATENCY") or 0)
    if seconds > 0:
        await anyio.sleep(seconds)


class OpenAIChat:
    """POST {base_url}/chat/completions with urllib. Use it inside `ctx.run` only."""

    def __init__(self, base_url: str = DEFAULT_BASE_URL, api_key: str | None = None,
                 model: str = DEFAULT_MODEL, *, timeout: float = 60.0, temperature: float = 0.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.timeout = timeout
        self.temperature = temperature

    def __repr__(self) -> str:
        return f"OpenAIChat({self.base_url!r}, model={self.model!r})"

    def request(self, messages: list[dict[str, Any]], idempotency_key: str | None = None,
                **params: Any) -> urllib.request.Request:
        """The HTTP request `complete` sends (separate so it can be inspected and tested)."""
        body = {"model": self.model, "messages": messages, "temperature": self.temperature, **params}
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return urllib.request.Request(
            f"{self.base_url}/chat/completions", data=json.dumps(body).encode(), headers=headers, method="POST",
        )

    async def complete(self, messages: list[dict[str, Any]], **params: Any) -> Reply:
        """One chat completion. Raises TerminalError for answers a retry cannot fix (400, 401, 404...).

        urllib blocks, so the request runs in a worker thread: concurrent steps (tool calls
        gathered in parallel) keep running meanwhile.
        """
        key = current_step().idempotency_key
        request = self.request(messages, key, **params)
        try:
            payload = await anyio.to_thread.run_sync(self._send, request)
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode("utf-8", "replace")
            if exc.code in (408, 409, 429) or exc.code >= 500:
                raise TransientHTTPError(f"{self.base_url} answered {exc.code}: {detail}") from None
            raise TerminalError(f"{self.base_url} answered {exc.code}: {detail}") from None
        # URLError and timeouts propagate as ordinary exceptions: the step is retried.
        record_call(self.model)
        try:
            content = payload["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise TerminalError(f"{self.base_url} sent an unexpected response: {str(payload)[:300]}") from None
        usage = payload.get("usage") or {}
        return Reply(content, payload.get("model", self.model),
                     int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))

    def _send(self, request: urllib.request.Request) -> Any:
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read())


class ScriptedModel:
    """An offline model that follows the examples' JSON protocols well enough to demonstrate them.

    It reads the last user message and answers by rule, not by learning: a research
    question gets a plan of searches, observations get an answer quoting them, anything
    else gets a short draft. It is deterministic, so tests can assert on its output.
    """

    model = "scripted"

    def __repr__(self) -> str:
        return "ScriptedModel()"

    async def complete(self, messages: list[dict[str, Any]], **params: Any) -> Reply:
        await simulated_latency()
        record_call(self.model)
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        if "ReAct" in system:
            content = json.dumps(_react(messages, last))
        else:
            content = f"Draft: {last.strip()}"
        return Reply(content, self.model, sum(len(m["content"]) for m in messages) // 4, len(content) // 4)


def _react(messages: list[dict[str, Any]], last: str) -> dict[str, Any]:
    question = next(m["content"] for m in messages if m["role"] == "user").removeprefix("Question: ")
    observations = [m["content"] for m in messages if m["role"] == "user" and m["content"].startswith("Observation")]
    if not observations:
        words = [w for w in re.findall(r"[a-z0-9-]+", question.lower()) if w not in _STOPWORDS]
        queries = list(dict.fromkeys(words))[:3] or [question]
        return {"thought": f"I will search for {', '.join(queries)}.",
                "actions": [{"tool": "search", "input": q} for q in queries]}
    found = dict.fromkeys(f"{text} [{source}]" for obs in observations
                          for source, text in re.findall(r"\[([\w-]+)\] (.+)", obs))
    answer = " ".join(found) or "The library has nothing about that."
    return {"thought": "I have enough to answer.", "answer": answer}


_STOPWORDS = {
    "a", "an", "and", "are", "at", "be", "by", "can", "do", "does", "for", "from", "how", "i", "in", "is",
    "it", "need", "of", "on", "or", "the", "to", "what", "when", "which", "who", "why", "with", "without",
}


def chat_model() -> OpenAIChat | ScriptedModel:
    """The configured endpoint if there is one, else the offline model."""
    base_url = os.environ.get("OPENAI_BASE_URL")
    api_key = os.environ.get("OPENAI_API_KEY")
    if os.environ.get("EXAMPLE_LLM") == "scripted" or not (base_url or api_key):
        return ScriptedModel()
    return OpenAIChat(base_url or DEFAULT_BASE_URL, api_key, os.environ.get("OPENAI_MODEL") or DEFAULT_MODEL)
