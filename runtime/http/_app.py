"""`create_app`: the Starlette application of the HTTP API, Server-Sent Events and web UI.

Everything here reaches invocations through `runtime.Engine` and the `journal.Store`
protocol; the routes are in `routes/`, one module per resource, each endpoint with its
OpenAPI operation beside it (`_openapi.operation`), which `/openapi.json` collects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from journal.errors import JournalError

from .. import Engine
from ._errors import ApiError, api_error, error_response, journal_error
from ._middleware import BearerToken, KnownHosts, SameOrigin, SlashesInIds, StoreWait
from ._openapi import document
from ._request_checks import DEFAULT_MAX_BODY
from ._service import Service
from .routes import all_routes


def create_app(engine: Engine, *, handlers: dict[str, Callable[..., Any]] | None = None, token: str | None = None,
               max_body: int = DEFAULT_MAX_BODY, workers: int = 0, poll: float = 0.05,
               allowed_hosts: Sequence[str] | None = None) -> Starlette:
    """The ASGI application over `engine`: mount it in your own ASGI server or app, or let
    `journal serve` run it. Requests may start only the `handlers` given here, by name.

    With `token`, every request but the UI's static shell must carry `Authorization: Bearer
    TOKEN`. With `allowed_hosts`, a request whose `Host` header names another host is
    answered 421 (a DNS name rebound to a loopback address reaches the server, but is not
    served). A request that changes state must be `application/json` and carry no
    `Origin` but the server's own, whatever the options, so no other web page can send it.
    `max_body` bounds request bodies (413 past it); `workers` is what `/healthz`
    reports as running invocations; `poll` is how often long polls and event streams look
    at the store. Run invocations beside it with `engine.serve()`, and call
    `stop_streams(app)` before stopping the server so that long polls and event streams end.
    """
    service = Service(engine, handlers or {}, token=token, max_body=max_body, workers=workers, poll=poll)
    middleware = [] if allowed_hosts is None else [Middleware(KnownHosts, hosts=allowed_hosts)]
    middleware += [Middleware(SameOrigin), Middleware(SlashesInIds)]
    if service.token is not None:
        middleware.append(Middleware(BearerToken, token=service.token))
    middleware.append(Middleware(StoreWait, store=engine.store))
    app = Starlette(routes=all_routes(), middleware=middleware,
                    exception_handlers={ApiError: api_error, JournalError: journal_error, 404: _not_found,
                                        405: _method_not_allowed})
    app.state.service = service
    service.openapi = document(app.routes)
    engine.observe(service.counts)
    service.metrics = _metrics(engine)
    return app


def _metrics(engine: Engine) -> Any:
    """`GET /metrics`'s source, observing `engine`; None without the metrics extra (the route
    then says how to install it)."""
    try:
        from ..metrics import Metrics
    except ImportError:
        return None
    metrics = Metrics(engine.store, committer=engine.committer)
    engine.observe(metrics)
    return metrics


def stop_streams(app: Starlette) -> None:
    """End the long polls (`/result?wait=`) and event streams of `app`: before its server stops."""
    service: Service = app.state.service
    service.stopping.set()


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(404, "NotFound", f"no route {request.method} {request.url.path}; see /openapi.json")


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    return error_response(405, "MethodNotAllowed", f"{request.method} is not allowed on {request.url.path}")


__all__ = ("create_app", "stop_streams")
