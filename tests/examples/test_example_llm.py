"""The chat-completions adapter, against a tiny HTTP server on 127.0.0.1 started by the test."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import llm  # examples/llm.py (conftest puts examples/ on sys.path)
import msgspec
import pytest

from journal import Status, Step, decode_entry
from runtime import Context, Engine, RetryPolicy, idempotency_key

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]


def completion(content: str, model: str = "local-model") -> dict:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


class FakeEndpoint:
    """Records every request and answers from a script of (status, body) pairs."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.script: list[tuple[int, dict]] = []
        self.default = (200, completion("hi"))
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.requests.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
                status, payload = endpoint.script.pop(0) if endpoint.script else endpoint.default
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def endpoint(workspace):
    with FakeEndpoint() as fake:
        yield fake


def test_request_is_an_openai_chat_completion(endpoint):
    client = llm.OpenAIChat(endpoint.base_url + "/", "sk-test", "local-model", temperature=0.2)
    request = client.request(MESSAGES, "inv-1:3", max_tokens=50)
    assert request.full_url == endpoint.base_url + "/chat/completions"
    assert request.get_method() == "POST"
    headers = {k.lower(): v for k, v in request.header_items()}
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["idempotency-key"] == "inv-1:3"
    assert headers["content-type"] == "application/json"
    assert json.loads(request.data) == {
        "model": "local-model", "messages": MESSAGES, "temperature": 0.2, "max_tokens": 50,
    }


def test_request_without_a_key_sends_no_authorization(endpoint):
    headers = dict(llm.OpenAIChat(endpoint.base_url).request(MESSAGES).header_items())
    assert "Authorization" not in headers and "Idempotency-key" not in headers


@pytest.mark.anyio
async def test_each_step_sends_its_own_stable_idempotency_key(endpoint):
    client = llm.OpenAIChat(endpoint.base_url, "sk-test", "local-model")

    async def ask_twice(ctx: Context) -> list:
        first = await ctx.run("ask", client.complete, MESSAGES)
        second = await ctx.run("ask", client.complete, MESSAGES + [{"role": "user", "content": "Again."}])
        return [first, second]

    async with Engine.open() as engine:
        outcome = await engine.run(ask_twice, id="chat-1")
        again = await engine.run(ask_twice, id="chat-1")
        keys = _step_keys(engine, "chat-1")

    assert outcome.status == Status.COMPLETED
    # The result is decoded from the journal by the handler's annotation (`list`), so the live
    # run and the attached one see the same plain values.
    assert outcome.result[0] == msgspec.to_builtins(llm.Reply("hi", "local-model", 12, 3))
    assert again.result == outcome.result
    assert [r["path"] for r in endpoint.requests] == ["/v1/chat/completions"] * 2
    assert [r["headers"]["Idempotency-Key"] for r in endpoint.requests] == keys
    assert len(set(keys)) == 2 and all(k.startswith("chat-1:") for k in keys)
    assert all(r["headers"]["Authorization"] == "Bearer sk-test" for r in endpoint.requests)
    assert endpoint.requests[1]["body"]["messages"][-1] == {"role": "user", "content": "Again."}


@pytest.mark.anyio
async def test_transient_errors_are_retried_with_the_same_key(endpoint, workspace):
    endpoint.script = [(503, {"error": "overloaded"}), (429, {"error": "slow down"})]
    client = llm.OpenAIChat(endpoint.base_url, "sk-test")

    async def ask(ctx: Context) -> str:
        reply = await ctx.run("ask", client.complete, MESSAGES, retry=RetryPolicy(initial_interval=0, jitter=0))
        return reply.content

    async with Engine.open() as engine:
        outcome = await engine.run(ask, id="chat-2")
        step = decode_entry(engine.store.entries("chat-2")[1][1])
        keys = _step_keys(engine, "chat-2")

    assert outcome.result == "hi"
    assert [r["headers"]["Idempotency-Key"] for r in endpoint.requests] == keys * 3
    assert isinstance(step, Step) and step.attempts == 3
    assert len(workspace.calls()) == 1  # only the answered request is a paid call


@pytest.mark.anyio
async def test_client_errors_fail_the_step_at_once(endpoint):
    endpoint.script = [(401, {"error": {"message": "invalid api key"}})]
    client = llm.OpenAIChat(endpoint.base_url, "sk-wrong")

    async def ask(ctx: Context) -> str:
        return (await ctx.run("ask", client.complete, MESSAGES)).content

    async with Engine.open() as engine:
        outcome = await engine.run(ask, id="chat-3")

    assert outcome.status == Status.FAILED
    assert "401" in outcome.error.message and "invalid api key" in outcome.error.message
    assert len(endpoint.requests) == 1


@pytest.mark.anyio
async def test_research_agent_talks_to_a_configured_endpoint(endpoint, workspace, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", endpoint.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_MODEL", "local-model")
    plan = {"thought": "search first", "actions": [{"tool": "search", "input": "lease"}]}
    answer = {"thought": "done", "answer": "A lease expires unless renewed [lease]."}
    endpoint.script = [
        (200, completion("```json\n" + json.dumps(plan) + "\n```")),
        (200, completion(json.dumps(answer))),
    ]

    async with Engine.open() as engine:
        outcome = await engine.run(f"{EXAMPLES / 'research.py'}:research", {"question": "What is a lease?"}, id="r-http")
        steps, keys = _steps(engine, "r-http"), _step_keys(engine, "r-http")

    assert outcome.status == Status.COMPLETED, outcome
    assert outcome.result.answer == "A lease expires unless renewed [lease]."
    assert outcome.result.sources == ["lease"]
    # The model calls' keys: the first and last steps (between them, the search step).
    model_keys = [k for k, step in zip(keys, steps, strict=False) if step.name != "search"]
    assert [r["headers"]["Idempotency-Key"] for r in endpoint.requests] == model_keys
    observation = endpoint.requests[1]["body"]["messages"][-1]["content"]
    assert observation.startswith("Observation:") and "[lease]" in observation


def test_chat_model_falls_back_to_the_offline_model(workspace, monkeypatch):
    assert isinstance(llm.chat_model(), llm.ScriptedModel)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    client = llm.chat_model()
    assert isinstance(client, llm.OpenAIChat)
    assert (client.base_url, client.api_key, client.model) == (llm.DEFAULT_BASE_URL, "sk-test", llm.DEFAULT_MODEL)
    monkeypatch.setenv("EXAMPLE_LLM", "scripted")
    assert isinstance(llm.chat_model(), llm.ScriptedModel)
    monkeypatch.delenv("EXAMPLE_LLM")
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # a local server needs no key
    client = llm.chat_model()
    assert isinstance(client, llm.OpenAIChat) and client.api_key is None


def _steps(engine, invocation_id):
    from journal import Step, decode_entry

    entries = (decode_entry(data) for _, data in engine.store.entries(invocation_id))
    return [e for e in entries if isinstance(e, Step)]


def _step_keys(engine, invocation_id):
    """The idempotency keys the journaled steps were given, in seq order."""
    return [idempotency_key(invocation_id, step) for step in _steps(engine, invocation_id)]
