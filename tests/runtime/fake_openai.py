"""A minimal OpenAI-compatible chat completions endpoint on loopback, for the integrations'
tests with the frameworks' own OpenAI clients: it answers by how many tool results the
request holds (a tool call, then the tool's result quoted), streams when asked, and counts
the requests it served."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
                turn = len(results)
                if body.get("stream"):
                    self._stream(turn, results)
                else:
                    self._send("application/json", json.dumps(_completion(turn, results)).encode())

            def _stream(self, turn: int, results: list[str]) -> None:
                message = _completion(turn, results)["choices"][0]["message"]
                if message.get("tool_calls"):
                    deltas = [{"role": "assistant", "tool_calls": [{"index": 0, **message["tool_calls"][0]}]}]
                else:
                    deltas = [{"role": "assistant", "content": word} for word in _tokens(message["content"])]
                events = [{"id": f"chatcmpl-{turn}", "object": "chat.completion.chunk", "created": 0, "model": "fake",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
                events.append({"id": f"chatcmpl-{turn}", "object": "chat.completion.chunk", "created": 0,
                               "model": "fake", "choices": [{"index": 0, "delta": {},
                                                             "finish_reason": "tool_calls" if turn == 0 else "stop"}]})
                data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send("text/event-stream", data.encode())

            def _send(self, kind: str, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def _completion(turn: int, results: list[str]) -> dict[str, Any]:
    if not results:
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": f"Forecast: {results[0]}"}, "stop"
    return {"id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}}


def _tokens(text: str) -> list[str]:
    """`text` in pieces as a model streams them: each word with the space before it."""
    words = text.split(" ")
    return [words[0], *(" " + w for w in words[1:])]
