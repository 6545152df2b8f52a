"""`journal serve`: workers plus the HTTP API and web UI (`runtime.http`), in one process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import click

from journal.backends import describe

from ._common import (
    OK,
    Exit,
    db_option,
    echo_err,
    edge,
    fail,
    how_to_stop,
    own_the_collector,
    retain_option,
    stop_signals,
    stopped_message,
    store_path,
)
from ._handlers import Spec, handler_option, importable_cwd, load_handlers
from ._report import Progress
from ._workers import serving_engine, stop_waiting

DEFAULT_HTTP = "127.0.0.1:8420"


def _split_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise fail(f"--http {text!r} is not HOST:PORT (for example 127.0.0.1:8420, or [::1]:8420)")
    return host.strip("[]"), int(port)


def _token(token_file: str | None) -> str | None:
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read --token-file {token_file}: {exc}") from None
        if not token:
            raise fail(f"--token-file {token_file} is empty; write the token into it")
        return token
    token = os.environ.get("JOURNAL_TOKEN", "").strip()
    return token or None


def _allowed_hosts(host: str, allowed: tuple[str, ...], token: str | None) -> list[str] | None:
    """The names a request's Host header may give: the bound address and localhost, and
    --allow-host's. Always checked (a DNS name rebound to 127.0.0.1 would otherwise pass
    for the server), except on every interface (0.0.0.0, ::) with a token and no
    --allow-host: such a server answers to any name that reaches it, and the token guards it."""
    for name in allowed:
        if not name or "*" in name[1:] or (name.startswith("*") and not name.startswith("*.")) or "/" in name:
            raise fail(f"--allow-host {name!r} is not a host name (for example journal.internal or *.example.com)")
    if not allowed and token is not None and host in ("0.0.0.0", "::"):
        return None
    bound = f"[{host}]" if ":" in host else host
    return list(dict.fromkeys([bound, "localhost", *(name.lower() for name in allowed)]))


def _listen(host: str, port: int) -> socket.socket:
    """Bind before anything else starts, so a taken port is reported plainly (and :0 works)."""
    sock = None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --http HOST:PORT") from None
    sock.setblocking(False)
    return sock


@click.command()
@db_option
@click.option("--http", "address", metavar="HOST:PORT", default=DEFAULT_HTTP, show_default=True,
              help="Where to listen. Anything but loopback needs a token. Port 0 picks a free port.")
@handler_option("A handler this server runs and requests may start (repeat for several): NAME=TARGET by "
                "NAME, or a bare TARGET by its path, as `journal run` records it (so the server runs, and takes "
                "over, invocations `journal run TARGET` started). TARGET is path/to/file.py:function or "
                "package.module:function.")
@click.option("--token-file", metavar="PATH", type=click.Path(dir_okay=False),
              help="A file holding the bearer token every request must carry (default: $JOURNAL_TOKEN).")
@click.option("--allow-host", "allow_hosts", metavar="NAME", multiple=True,
              help="Another name requests may address this server by in their Host header (repeat for several); "
                   "by default only the --http address and localhost.")
@click.option("--workers", type=click.IntRange(0), default=16, show_default=True,
              help="How many invocations this process runs at once (0: API only, other workers run them).")
@click.option("--durability", type=click.Choice(["sync", "async", "exit"]), default="sync", show_default=True)
@click.option("--max-body", metavar="BYTES", type=click.IntRange(1), default=1 << 20, show_default=True,
              help="The largest request body accepted; larger ones get 413.")
@retain_option
@click.option("--quiet", "-q", is_flag=True, help="Do not log each step (failed invocations are still logged).")
@edge
def serve(db: str | None, address: str, handler_specs: tuple[Spec, ...], token_file: str | None,
          allow_hosts: tuple[str, ...], workers: int, durability: str, max_body: int, retention: Any,
          quiet: bool) -> None:
    """Serve the HTTP API and web UI, and run invocations (until SIGTERM or Ctrl-C).

    Requests may start only the handlers registered with --handler [NAME=]TARGET; they
    never name code to import. A bare TARGET is known by its path, as `journal run
    TARGET` records it: the server then runs, and takes over once their process is gone,
    the invocations `journal run` started from that file. Binding to anything but loopback requires a token
    (--token-file or JOURNAL_TOKEN), which every API request must then send as
    `Authorization: Bearer TOKEN`. A request must address the server by the --http
    address or localhost (or a name given with --allow-host), and a request that changes
    state must be application/json and come from no other web page. SIGTERM (or Ctrl-C)
    stops cleanly, with exit status 0: invocations in flight give their lease back and
    stay pending. docs/http.md describes every endpoint.

    Example:

    \b
        journal serve --handler refund=examples/approval.py:refund --http 127.0.0.1:8420
    """
    try:
        import uvicorn

        from runtime.http import create_app, is_loopback, stop_streams
    except ImportError as exc:
        raise fail(f"journal serve needs the http extra ({exc}); install it with: pip install 'journal-agents[http]'") from None

    host, port = _split_address(address)
    token = _token(token_file)
    if token is None and not is_loopback(host):
        raise fail(
            f"refusing to listen on {host}:{port} without a token: anyone who can reach it could start "
            "handlers and read every journal. Give one with --token-file PATH or JOURNAL_TOKEN, or listen "
            "on loopback (--http 127.0.0.1:8420)"
        )
    importable_cwd()
    handlers = load_handlers(handler_specs)
    hosts = _allowed_hosts(host, allow_hosts, token)
    path = store_path(db)
    steps = Progress(not quiet, prefix_ids=True)
    sock = _listen(host, port)  # before the store is opened: a taken port leaves nothing behind
    # A busy service holds many live objects (records, tasks, connections). With CPython's
    # default thresholds the collector's older-generation passes held the event loop for up
    # to ~200 ms: GET /invocations/ID answered with a p99 of 165-184 ms. Collecting the
    # youngest generation every 50,000 allocations instead of 700 gave 71-87 ms, and starts
    # went from 3,200-4,000/s to 4,400-5,100/s (`python -m bench.http_load`, 10,000
    # invocations, 200 clients, two pairs run alternately on an idle 2-core machine).
    own_the_collector()

    async def main() -> None:
        # The API listens at once; until the store is open (its server may be away at
        # start-up) every request is answered 503, as while it is away later.
        front = _Front()
        config = uvicorn.Config(front, log_level="warning", access_log=False, proxy_headers=False,
                                lifespan="off", timeout_graceful_shutdown=5)
        server = _server(config)
        bound = sock.getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        echo_err(f"serving on http://{shown}:{bound[1]} (store {describe(path)}, {workers} workers, "
                 f"handlers: {', '.join(handlers) or 'none'}); {how_to_stop()}")
        stopped, opening, worker_scope, watching = (anyio.Event(), anyio.CancelScope(), anyio.CancelScope(),
                                                    anyio.CancelScope())
        engines: list[Any] = []

        async def run_engine() -> None:
            with opening:  # (cancelled only before the store is open: nothing to give back then)
                # The engine runs only the handlers given here, and invocations record their
                # NAME: a record never chooses the code a worker imports (DESIGN.md).
                async with serving_engine(path, durability=durability, handlers=handlers) as engine:
                    engine.observe(steps)
                    front.app = create_app(engine, handlers=handlers, token=token, max_body=max_body,
                                           workers=workers, allowed_hosts=hosts)
                    engines.append(engine)
                    with worker_scope:
                        async with anyio.create_task_group() as work:
                            if retention:
                                work.start_soon(engine.retain, retention)
                            if workers:
                                # Batches a crash interrupted go on beside the workers.
                                work.start_soon(engine.resume_batches)
                                await engine.serve(concurrency=workers)
                            elif retention:
                                await stopped.wait()  # (an API-only server trims until it stops)
                            work.cancel_scope.cancel()
                    await stopped.wait()  # the API uses the engine until the server has stopped

        def stop() -> None:
            if engines:
                # Workers first: their invocations give the lease back and stay pending
                # (waiting a little for a database that is away, not for ever).
                stop_waiting(engines[0].store)
                worker_scope.cancel()
                stop_streams(front.app)
            else:
                opening.cancel()
            server.should_exit = True

        async def run_server() -> None:
            await server.serve(sockets=[sock])
            stopped.set()
            watching.cancel()
            stop()  # the server stopped on its own: stop the rest too

        async def on_signal() -> None:
            with watching, anyio.open_signal_receiver(*stop_signals()) as signals:
                async for signum in signals:
                    stopped_by.append(signal.Signals(signum))
                    stop()
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(on_signal)
            tg.start_soon(run_server)
            tg.start_soon(run_engine)

    stopped_by: list[signal.Signals] = []
    try:
        anyio.run(main, backend="asyncio", backend_options={"use_uvloop": _has_uvloop()})
    finally:
        sock.close()
    if stopped_by:
        raise Exit(OK, stopped_message(stopped_by[0], steps.summary()))
    raise Exit(OK, f"stopped ({steps.summary()}); invocations in flight are pending for the next worker")


class _Front:
    """The ASGI application uvicorn serves: the API once the store is open (`app`), and
    until then 503 to every request, saying nothing of the store to a caller that may not
    hold the token."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.app is not None:
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        body = json.dumps({"error": {"type": "StoreUnavailable", "message": (
            "the journal store is not open yet (its database cannot be reached); try again shortly")}}).encode()
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"), (b"retry-after", b"1"),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def _has_uvloop() -> bool:
    # uvloop's event loop and httptools' parser (both in the `http` extra): in one pair of
    # load-test runs (bench/http_load.py, 1,000 invocations) starts/s went from 422 to 845
    # and GET /invocations/ID from 643 to 3,997 requests/s.
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def _server(config: Any) -> Any:
    """uvicorn's server without its own signal handling: `serve` decides how to stop."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)
