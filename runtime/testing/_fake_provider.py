"""A fake model provider on loopback, OpenAI-compatible, that enforces requests and tokens per
period as providers do: for tests and benchmarks of a fleet under limits, through the real
`openai` client over real HTTP.

`POST /v1/chat/completions` answers a chat completion (streamed or not) whose usage counts the
prompt (a token per 4 characters, rounded up) and the completion (`max_tokens`, else
`completion_tokens`). A request is admitted only if, in the sliding window of `period` seconds
ending now, at most `rpm - 1` requests and `tpm - its tokens` tokens were admitted before it:
otherwise it gets 429 with `Retry-After`, `x-ratelimit-limit-*`, `x-ratelimit-remaining-*` and
`x-ratelimit-reset-*` headers, as OpenAI sends them. It counts what it served and refused.

    with FakeProvider(rpm=60, tpm=40_000) as provider:
        client = openai.OpenAI(base_url=provider.url, api_key="fake", max_retries=0)
"""

from __future__ import annotations

import collections
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def count_tokens(messages: Any) -> int:
    """The fake's token count of a prompt: a token per 4 characters of its messages' text."""
    chars = 0
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(part.get("text", "")) for part in content if isinstance(part, dict))
    return max(1, math.ceil(chars / 4))


class FakeProvider:
    """An OpenAI-compatible server on 127.0.0.1 that enforces `rpm` requests and `tpm` tokens in
    every window of `period` seconds (60: per minute). `latency`: seconds each answer takes."""

    def __init__(self, *, rpm: int = 60, tpm: int = 40_000, period: float = 60.0, latency: float = 0.0,
                 completion_tokens: int = 16) -> None:
        self.rpm, self.tpm, self.period, self.latency = rpm, tpm, period, latency
        self.completion_tokens = completion_tokens
        self._lock = threading.Lock()
        self._requests: collections.deque[float] = collections.deque()
        self._tokens: collections.deque[tuple[float, int]] = collections.deque()
        self._tokens_in_window = 0
        self.served: list[tuple[float, int]] = []  # (time.time(), tokens) of every answered request
        self.refused = 0  # 429s
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/v1"

    def start(self) -> FakeProvider:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def served_tokens(self) -> int:
        return sum(tokens for _, tokens in self.served)

    def admit(self, tokens: int) -> dict[str, str] | None:
        """Count a request of `tokens` if the windows allow it (None); else the 429's headers."""
        with self._lock:
            now = time.monotonic()
            horizon = now - self.period
            while self._requests and self._requests[0] <= horizon:
                self._requests.popleft()
            while self._tokens and self._tokens[0][0] <= horizon:
                self._tokens_in_window -= self._tokens.popleft()[1]
            requests_ok = len(self._requests) + 1 <= self.rpm
            tokens_ok = self._tokens_in_window + tokens <= self.tpm
            if requests_ok and tokens_ok:
                self._requests.append(now)
                self._tokens.append((now, tokens))
                self._tokens_in_window += tokens
                self.served.append((time.time(), tokens))
                return None
            self.refused += 1
            # When enough of the window will have passed for this request to fit.
            reset_requests = 0.0 if requests_ok else self._requests[len(self._requests) - self.rpm] + self.period - now
            reset_tokens = 0.0
            if not tokens_ok:
                freed, need = 0, self._tokens_in_window + tokens - self.tpm
                for at, n in self._tokens:
                    freed += n
                    if freed >= need:
                        reset_tokens = at + self.period - now
                        break
                else:
                    reset_tokens = self.period
            wait = max(reset_requests, reset_tokens, 0.001)
            return {
                "retry-after": str(max(1, math.ceil(wait))) if wait >= 1 else f"{wait:.3f}",
                "retry-after-ms": str(math.ceil(wait * 1000)),
                "x-ratelimit-limit-requests": str(self.rpm),
                "x-ratelimit-limit-tokens": str(self.tpm),
                "x-ratelimit-remaining-requests": str(max(0, self.rpm - len(self._requests))),
                "x-ratelimit-remaining-tokens": str(max(0, self.tpm - self._tokens_in_window)),
                "x-ratelimit-reset-requests": f"{max(reset_requests, 0.0):.3f}s",
                "x-ratelimit-reset-tokens": f"{max(reset_tokens, 0.0):.3f}s",
            }


def _handler(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: a test reads counters, not logs
            return None

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})
                return
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
                return
            prompt = count_tokens(body.get("messages"))
            completion = body.get("max_tokens") or body.get("max_completion_tokens") or provider.completion_tokens
            completion = min(int(completion), provider.completion_tokens)
            refusal = provider.admit(prompt + completion)
            if refusal is not None:
                self._send(429, {"error": {"message": "Rate limit reached: too many requests or tokens per period",
                                           "type": "requests", "code": "rate_limit_exceeded"}}, refusal)
                return
            if provider.latency:
                time.sleep(provider.latency)
            usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
            text = " ".join(["ok"] * completion)
            model = body.get("model", "fake")
            if body.get("stream"):
                self._stream(model, text, usage, bool((body.get("stream_options") or {}).get("include_usage")))
                return
            self._send(200, {
                "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage,
            })

        def _stream(self, model: str, text: str, usage: dict[str, int], include_usage: bool) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": model}
            words = text.split(" ")
            for i, word in enumerate(words):
                delta = {"content": word + (" " if i < len(words) - 1 else "")}
                if i == 0:
                    delta["role"] = "assistant"
                chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            end = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            self.wfile.write(b"data: " + json.dumps(end).encode() + b"\n\n")
            if include_usage:
                tail = {**base, "choices": [], "usage": usage}
                self.wfile.write(b"data: " + json.dumps(tail).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler
