"""A small OpenAI-compatible chat completions server on loopback, for tests that drive an
SDK's own client (`openai.AsyncOpenAI`, and the agent frameworks' models built on it) over
real HTTP instead of a scripted model.

`POST /v1/chat/completions` answers with what the test's `respond` function returns for the
request's JSON body: the assistant message (`text(...)`, `tool_calls(...)`), or a whole
`chat.completion` object for full control of the answer's fields. Every request body is kept
in `requests`. Each answer carries an `x-request-id` header (`req-N`, N counting requests
from 1), which the OpenAI SDK reports as the response's request id. Streaming is not
offered (`"stream": true` is answered 400).

    with FakeOpenAI(lambda body: text("hello")) as server:
        client = openai.AsyncOpenAI(base_url=server.url, api_key="test")
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Respond = Callable[[dict[str, Any]], dict[str, Any]]


def text(content: str) -> dict[str, Any]:
    """An assistant message with `content`."""
    return {"role": "assistant", "content": content}


def tool_calls(*calls: tuple[str, dict[str, Any], str]) -> dict[str, Any]:
    """An assistant message calling tools: each call is (name, arguments, call id)."""
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        for name, arguments, call_id in calls]}


def completion(message: dict[str, Any], *, model: str = "fake-model", number: int = 1,
               usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `chat.completion` object that answers with `message`."""
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1_700_000_000 + number,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
        "usage": usage if usage is not None else {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class FakeOpenAI:
    """The server, on a free loopback port, serving from a thread of its own while open."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions" or body.get("stream"):
                    self._answer(400 if body.get("stream") else 404, {"error": {
                        "message": f"the fake server answers only non-streamed POST /v1/chat/completions, not {self.path}",
                        "type": "invalid_request_error"}})
                    return
                fake.requests.append(body)
                answer = fake.respond(body)
                if answer.get("object") != "chat.completion":
                    answer = completion(answer, model=body.get("model", "fake-model"), number=len(fake.requests))
                self._answer(200, answer, request_id=f"req-{len(fake.requests)}")

            def _answer(self, status: int, payload: dict[str, Any], request_id: str | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                if request_id is not None:
                    self.send_header("x-request-id", request_id)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
                pass  # a test's output stays its own

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)

    @property
    def url(self) -> str:
        """The base URL an OpenAI client takes (`base_url=`)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
