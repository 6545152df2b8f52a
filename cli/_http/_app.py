"""The Starlette application: routes of the JSON API, Server-Sent Events, the web UI shell.

Everything here reaches invocations through `runtime.Engine` and the `journal.Store`
protocol; the command that runs it (with workers) is cli/_serve.py.
"""

from __future__ import annotations

import importlib.resources
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from journal import LiveFeed, Status
from journal.errors import InvocationConflict, JournalError
from runtime import Engine

from .._state import state_json
from . import _events, _views
from ._errors import ApiError, JSONResponse, api_error, error_response, journal_error
from ._guard import DEFAULT_MAX_BODY, authorized, checked_id, read_json
from ._openapi import OPENAPI

_STATIC = importlib.resources.files(__package__) / "static"
T = TypeVar("T")
_MAX_WAIT = 300.0
_MAX_LIMIT = 1000
_REMEMBERED = 10_000


class StartRequest(msgspec.Struct, forbid_unknown_fields=True):
    handler: str
    input: Any = None
    id: str | None = None
    key: str | None = None
    durability: str | None = None


class PromiseRequest(msgspec.Struct, forbid_unknown_fields=True):
    value: Any = None
    reject: str | None = None


class Service:
    """What the routes share: the engine, the handlers a request may name, and the guards."""

    def __init__(self, engine: Engine, handlers: dict[str, Callable[..., Any]], *, token: str | None = None,
                 max_body: int = DEFAULT_MAX_BODY, workers: int = 0, poll: float = 0.05) -> None:
        self.engine = engine
        self.store = engine.store
        self.handlers = handlers
        self.token = token.encode() if token else None
        self.max_body = max_body
        self.workers = workers
        self.poll = poll
        # Set when the server stops: long polls and event streams end instead of holding it up.
        self.stopping = anyio.Event()
        # Steps this process ran live or replayed, per invocation (the UI shows replays).
        self._steps: OrderedDict[str, list[int]] = OrderedDict()

    def observe(self, invocation_id: str, name: str, how: str, seconds: float, replayed: bool) -> None:
        """An `Engine.on_step` hook: count the step as run live or replayed here."""
        counts = self._steps.pop(invocation_id, None) or [0, 0]
        counts[replayed] += 1
        self._steps[invocation_id] = counts
        if len(self._steps) > _REMEMBERED:
            self._steps.popitem(last=False)

    def steps_here(self, invocation_id: str) -> dict[str, int] | None:
        counts = self._steps.get(invocation_id)
        return None if counts is None else {"live": counts[0], "replayed": counts[1]}

    async def pause(self, feed: LiveFeed | None = None, timeout: float | None = None) -> bool:
        """Wait one poll interval (or `timeout`), or until live output arrives on `feed`; False once
        the server is stopping."""
        if feed is None:
            with anyio.move_on_after(self.poll):
                await self.stopping.wait()
            return not self.stopping.is_set()
        async with anyio.create_task_group() as tg:

            async def stop() -> None:
                await self.stopping.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(stop)
            await feed.wait_async(self.poll if timeout is None else timeout)
            tg.cancel_scope.cancel()
        return not self.stopping.is_set()

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, which reads the store: off the event loop when the store waits on the
        network (PostgreSQL), so one slow query never holds up the other requests and the workers."""
        return await self.engine.committer.read(fn, *args)

    async def require(self, invocation_id: str) -> Any:
        record = await self.read(self.store.get, checked_id(invocation_id))
        if record is None:
            raise ApiError(404, "InvocationNotFound", f"no invocation {invocation_id!r}; GET /invocations lists them")
        return record


def create_app(service: Service) -> Starlette:
    """The ASGI application of `journal serve` for `service`."""
    s = service

    async def start(request: Request) -> Response:
        body = _convert(await read_json(request, s.max_body), StartRequest)
        fn = s.handlers.get(body.handler)
        if fn is None:
            names = ", ".join(sorted(s.handlers)) or "none (start the server with --handler NAME=TARGET)"
            raise ApiError(422, "HandlerNotRegistered",
                           f"handler {body.handler!r} is not registered with this server; registered: {names}")
        if body.durability is not None and body.durability != s.engine.durability.value:
            raise ApiError(422, "DurabilityUnavailable",
                           f"this server runs invocations with durability {s.engine.durability.value!r}, not "
                           f"{body.durability!r}; leave it out, or start a server with --durability {body.durability}")
        if body.id is not None:
            checked_id(body.id)
        if body.key is not None:
            checked_id(body.key, "key")
        # On a local store nothing awaits between this look-up and the creation in `start`, so in
        # this process the answer (201 or 200) cannot go stale; on PostgreSQL another request or
        # host may create it meanwhile, and this one then attaches to it as `start` says.
        existing = await s.read(s.store.get, body.id) if body.id is not None else None
        if existing is not None and existing.handler != body.handler:
            return _conflict(existing, f"invocation {body.id!r} exists for handler {existing.handler!r}, "
                             f"not {body.handler!r}; choose another id")
        try:
            record = await s.engine.start(body.handler, body.input, id=body.id, key=body.key, lax_input=True)
        except InvocationConflict as exc:
            return _conflict(await s.read(s.store.get, body.id), str(exc))  # type: ignore[arg-type]
        except ValueError as exc:
            raise ApiError(422, "InvalidInput", str(exc)) from None
        return JSONResponse({"id": record.id, "status": record.status.value},
                            status_code=200 if existing is not None else 201)

    async def listing(request: Request) -> Response:
        q = request.query_params
        statuses = []
        for value in q.getlist("status"):
            for part in filter(None, value.split(",")):
                try:
                    statuses.append(Status(part))
                except ValueError:
                    raise ApiError(422, "InvalidStatus", f"status {part!r} is not one of "
                                   + ", ".join(x.value for x in Status)) from None
        limit = _number(q.get("limit"), "limit", 1, _MAX_LIMIT, default=100, integer=True)
        key = q.get("key")
        return JSONResponse(await s.read(_views.page, s.store, list(dict.fromkeys(statuses)), key, int(limit),
                                         q.get("cursor")))

    async def show(request: Request) -> Response:
        record = await s.require(_param(request, "id"))
        return JSONResponse({**await s.read(_views.detail, s.store, record), "steps_here": s.steps_here(record.id)})

    async def entries(request: Request) -> Response:
        record = await s.require(_param(request, "id"))
        after = _number(request.query_params.get("after"), "after", -1, math.inf, default=-1, integer=True)
        return JSONResponse({"entries": await s.read(_views.entries, s.store, record.id, int(after))})

    async def result(request: Request) -> Response:
        record = await s.require(_param(request, "id"))
        wait = _number(request.query_params.get("wait"), "wait", 0, _MAX_WAIT, default=0)
        with anyio.move_on_after(wait):
            while not record.finished and await s.pause():
                record = await s.require(record.id)
        return JSONResponse(_views.result(await s.require(record.id)))

    async def events(request: Request) -> Response:
        record = await s.require(_param(request, "id"))
        return StreamingResponse(_events.stream(s, record.id), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def promise(request: Request) -> Response:
        record = await s.require(_param(request, "id"))
        name = _param(request, "name")
        checked_id(name, "promise name")
        body = _convert(await read_json(request, s.max_body), PromiseRequest)
        if not await s.read(_promise_known, s, record, name):
            raise ApiError(404, "PromiseNotFound", _unknown_promise(record, name))
        if body.reject is not None:
            record = await s.engine.reject(record.id, name, body.reject)
        else:
            record = await s.engine.resolve(record.id, name, body.value)
        return JSONResponse({"id": record.id, "status": record.status.value})

    async def cancel(request: Request) -> Response:
        record = await s.require(_param(request, "id"))
        outcome = await s.engine.cancel(record.id, run=False)  # the workers deliver it
        return JSONResponse({"id": outcome.id, "status": outcome.status.value}, status_code=202)

    async def key_state(request: Request) -> Response:
        key = checked_id(_param(request, "key"), "key")
        return JSONResponse(await s.read(lambda: state_json(key, s.store.state(key), s.store.key_queue(key))))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "workers": s.workers})

    async def openapi(request: Request) -> Response:
        return JSONResponse(OPENAPI)

    async def page(request: Request) -> Response:
        return FileResponse(str(_STATIC / "index.html"), headers=_PAGE_HEADERS)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_response(404, "NotFound", f"no route {request.method} {request.url.path}; see /openapi.json")

    routes = [
        Route("/", page), Route("/i/{id}", page), Route("/k/{key}", page),
        Mount("/static", app=StaticFiles(directory=str(_STATIC)), name="static"),
        Route("/healthz", healthz), Route("/openapi.json", openapi),
        Route("/invocations", start, methods=["POST"]), Route("/invocations", listing),
        Route("/invocations/{id}", show), Route("/invocations/{id}/entries", entries),
        Route("/invocations/{id}/result", result), Route("/invocations/{id}/events", events),
        Route("/invocations/{id}/promises/{name}", promise, methods=["POST"]),
        Route("/invocations/{id}/cancel", cancel, methods=["POST"]),
        Route("/keys/{key}/state", key_state),
    ]
    app = Starlette(routes=routes, exception_handlers={ApiError: api_error, JournalError: journal_error,
                                                       404: not_found, 405: _method_not_allowed})
    return _SlashesInIds(_Guarded(app, s) if s.token is not None else app)  # type: ignore[return-value]


# A strict policy: the UI's own script and style only, nothing from the network, no inline code.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
_UI_SHELL = ("/", "/i/", "/k/", "/static/")


class _SlashesInIds:
    """Lets an id hold `/` (sent as %2F): routing sees it as NUL, which no id may contain,
    and `_param` turns it back. Without this, `/invocations/a%2Fb/result` would not route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw and b"%2f" in raw.lower():
            parts = raw.split(b"?", 1)[0].decode("latin-1").split("/")
            path = "/".join(unquote(part).replace("/", "\x00") for part in parts)
            scope = {**scope, "path": path}
        await self.app(scope, receive, send)


def _param(request: Request, name: str) -> str:
    return request.path_params[name].replace("\x00", "/")


class _Guarded:
    """Requires `Authorization: Bearer TOKEN` on every request but the UI's static shell,
    which holds no journal data (the page asks for the token and sends it on its API calls)."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            shell = path == "/" or any(path.startswith(p) for p in _UI_SHELL[1:])
            if not shell and not authorized(Request(scope), self.service.token or b""):
                response = error_response(401, "Unauthorized", "this server requires `Authorization: Bearer TOKEN` "
                                          "with the token it was started with (--token-file or JOURNAL_TOKEN)")
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    return error_response(405, "MethodNotAllowed", f"{request.method} is not allowed on {request.url.path}")


def _convert(data: Any, cls: type) -> Any:
    if not isinstance(data, dict):
        raise ApiError(422, "InvalidBody", f"the request body must be a JSON object for {cls.__name__}, "
                       f"got {type(data).__name__ if data is not None else 'nothing'}")
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise ApiError(422, "InvalidBody", f"the request body does not fit: {exc}") from None


def _conflict(existing: Any, message: str) -> Response:
    response = error_response(409, "InvocationConflict", message)
    if existing is not None:
        response = JSONResponse({"error": {"type": "InvocationConflict", "message": message},
                                 "id": existing.id, "status": existing.status.value}, status_code=409)
    return response


def _number(text: str | None, name: str, low: float, high: float, *, default: float,
            integer: bool = False) -> float:
    if text is None or text == "":
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:
        bound = f"from {low:g} to {high:g}" if high != math.inf else f"at least {low:g}"
        raise ApiError(422, "InvalidParameter", f"{name}={text!r} must be {'an integer' if integer else 'a number'} "
                       f"{bound}")
    return value


def _promise_known(s: Service, record: Any, name: str) -> bool:
    """Whether delivering promise `name` can ever reach the handler (a typo must not vanish)."""
    if name == record.waiting or name in record.waiting_any or s.store.resolution(record.id, name) is not None:
        return True
    if record.status in (Status.PENDING, Status.RUNNING):
        return True  # it may ask for it later: the value waits in the store
    return any(e["kind"] == "promise" and e["name"] == name for e in _views.entries(s.store, record.id, -1))


def _unknown_promise(record: Any, name: str) -> str:
    waits = [w["name"] for w in _views.waiting_on(record) if w["kind"] == "promise"]
    now = f"it waits on {', '.join(map(repr, waits))}" if waits else f"it is {record.status.value}"
    return f"invocation {record.id!r} has no promise {name!r}: {now}"


__all__ = ("Service", "create_app")
