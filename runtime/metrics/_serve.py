"""`journal worker --metrics HOST:PORT`: `GET /metrics` on a small server of its own, in a
thread, with the rules of `journal serve`'s API: a bearer token when one is given, and only
requests addressed to the listening address or localhost (a DNS name rebound to a loopback
address is refused)."""

from __future__ import annotations

import hmac
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

from ._metrics import Metrics


def serve_metrics(metrics: Metrics, host: str, port: int, *, token: str | None = None) -> ThreadingHTTPServer:
    """Serve `metrics` at `http://HOST:PORT/metrics` from a daemon thread; `shutdown()` the
    server returned to stop. Port 0 picks a free port (`server.server_address`)."""
    wanted = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            name = (self.headers.get("Host") or "").rpartition(":")[0].strip("[]") or self.headers.get("Host", "")
            bound = server.server_address[0]
            if name not in ("localhost", "127.0.0.1", "::1", bound):
                return self._answer(421, b"this server answers to its own address and localhost only\n")
            if wanted is not None and not hmac.compare_digest(
                    (self.headers.get("Authorization") or "").encode(), wanted):
                return self._answer(401, b"send Authorization: Bearer TOKEN (the worker's JOURNAL_TOKEN)\n")
            if self.path.partition("?")[0] != "/metrics":
                return self._answer(404, b"only /metrics is served here\n")
            try:
                body = metrics.exposition()
            except Exception as exc:  # noqa: BLE001 - the store is away: say so, keep serving
                return self._answer(503, f"cannot read the store: {exc}\n".encode())
            self._answer(200, body, CONTENT_TYPE_LATEST)

        def _answer(self, code: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            pass  # a scrape every few seconds is not news

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="journal-metrics", daemon=True).start()
    return server
