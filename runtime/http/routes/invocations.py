"""Starting invocations, listing them, and reading one: its document, entries and result."""

from __future__ import annotations

import datetime
import math
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal import Query, Status, check_tags, parse_tag
from journal.errors import InvocationConflict, JournalError
from journal.views import detail, export, result_json, summary_json

from .. import _views
from .._errors import ApiError, JSONResponse, error_response
from .._openapi import ID, errors, json_answer, json_body, operation, query_param, ref
from .._params import convert, number, param
from .._request_checks import checked_id, read_json
from .._service import service
from ..models import Entries, Error, ErrorDetail, Invocation, Page, QueueSummary, Result, Started, StartRequest

_MAX_WAIT = 300  # seconds (an integer: /openapi.json says 300)
_MAX_LIMIT = 1000


@operation("Start an invocation of a registered handler (idempotent by id)",
           body=json_body(StartRequest, required=True),
           responses={"201": json_answer(Started, "created"),
                      "200": json_answer(Started, "the same id and input exist already"),
                      **errors(400, 401, 403, 409, 413, 422)})
async def start(request: Request) -> Response:
    s = service(request)
    body = convert(await read_json(request, s.max_body), StartRequest)
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
    if body.tags:
        try:
            check_tags(body.tags)
        except JournalError as exc:
            raise ApiError(422, "InvalidTag", str(exc)) from None
    # On a local store nothing awaits between this look-up and the creation in `start`, so in
    # this process the answer (201 or 200) cannot go stale; on PostgreSQL another request or
    # host may create it meanwhile, and this one then attaches to it as `start` says.
    existing = await s.read(s.store.get, body.id) if body.id is not None else None
    if existing is not None and existing.handler != body.handler:
        return _conflict(existing, f"invocation {body.id!r} exists for handler {existing.handler!r}, "
                         f"not {body.handler!r}; choose another id")
    try:
        record = await s.engine.start(
            body.handler, body.input, id=body.id, key=body.key, lax_input=True, priority=body.priority,
            tags=body.tags, limit=body.limit, delay=body.delay, start_at=_start_at(body.start_at),
            debounce=body.debounce, debounce_max=body.debounce_max, if_busy=body.if_busy)
    except InvocationConflict as exc:
        return _conflict(await s.read(s.store.get, body.id), str(exc))
    except (ValueError, TypeError) as exc:
        raise ApiError(422, "InvalidInput", str(exc)) from None
    return JSONResponse(Started(record.id, record.status), status_code=200 if existing is not None else 201)


def _start_at(text: str | None) -> datetime.datetime | None:
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise ApiError(422, "InvalidInput", f"start_at {text!r} is not an ISO 8601 time with a zone; "
                       "e.g. \"2030-01-01T09:00:00Z\"")
    return when


@operation("List invocations, newest first",
           parameters=[query_param("status", ref(Status), "repeat or comma-separate"), query_param("key"),
                       query_param("handler"),
                       query_param("tag", description="KEY:VALUE; repeat for several (every one must hold)"),
                       query_param("q", description="text in the id, handler, key or error message (any case)"),
                       query_param("since", {"type": "string", "format": "date-time"}),
                       query_param("until", {"type": "string", "format": "date-time"}),
                       query_param("limit", {"type": "integer", "minimum": 1, "maximum": _MAX_LIMIT, "default": 100}),
                       query_param("cursor")],
           responses={"200": json_answer(Page, "a page"), **errors(400, 401, 422)})
async def listing(request: Request) -> Response:
    s = service(request)
    q = request.query_params
    statuses = []
    for value in q.getlist("status"):
        for part in filter(None, value.split(",")):
            try:
                statuses.append(Status(part))
            except ValueError:
                raise ApiError(422, "InvalidStatus", f"status {part!r} is not one of "
                               + ", ".join(x.value for x in Status)) from None
    limit = number(q.get("limit"), "limit", 1, _MAX_LIMIT, default=100, integer=True)
    key = q.get("key") or None
    if key is not None:
        checked_id(key, "key")
    tags = []
    for text in q.getlist("tag"):
        try:
            tags.append(parse_tag(text, ":"))
        except JournalError as exc:
            raise ApiError(422, "InvalidTag", str(exc)) from None
    cursor = q.get("cursor")
    query = Query(statuses=tuple(dict.fromkeys(statuses)), handler=q.get("handler") or None, key=key,
                  text=q.get("q") or None, since=_instant(q.get("since"), "since"),
                  until=_instant(q.get("until"), "until"), limit=int(limit),
                  after=_views.decode_cursor(cursor) if cursor else None, tags=tuple(dict.fromkeys(tags)))
    return JSONResponse(await s.read(_views.page, s.store, query))


@operation("The queue at a glance: counts by handler and status, the oldest runnable's wait",
           responses={"200": json_answer(QueueSummary, "the counts"), **errors(401)})
async def summary(request: Request) -> Response:
    """The queue at a glance, from the store's counts (no record is read)."""
    s = service(request)
    return JSONResponse(summary_json(await s.read(s.store.summary)))


def _instant(text: str | None, name: str) -> int | None:
    """An ISO 8601 time of the query string as µs (UTC when it names no zone), or 422."""
    if not text:
        return None
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ApiError(422, "InvalidParameter", f"{name}={text!r} is not an ISO 8601 time "
                       "(for example 2026-12-01T09:30:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1_000_000)


@operation("One invocation, without its entries", parameters=[ID],
           responses={"200": json_answer(Invocation, "the invocation"), **errors(400, 401, 404, 409)})
async def show(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    # A pending invocation whose handler this server's workers do not have waits on
    # {"kind": "handler"}: what this server knows (a worker elsewhere may have it); a server
    # that runs nothing (--workers 0) cannot tell.
    runs = s.engine.runs if s.workers else None
    return JSONResponse({**await s.read(detail, s.store, record, runs), "steps_here": s.steps_here(record.id)})


@operation("Its journal entries after a seq",
           parameters=[ID, query_param("after", {"type": "integer", "default": -1})],
           responses={"200": json_answer(Entries, "entries"), **errors(400, 401, 404, 409)})
async def entries(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    after = number(request.query_params.get("after"), "after", -1, math.inf, default=-1, integer=True)
    return JSONResponse({"entries": await s.read(lambda: list(export(s.store, record.id, int(after))))})


@operation("Its outcome, waiting up to `wait` seconds for it to finish",
           parameters=[ID, query_param("wait", {"type": "number", "minimum": 0, "maximum": _MAX_WAIT})],
           responses={"200": json_answer(Result, "finished, or where it stands when the wait ended"),
                      **errors(400, 401, 404, 409, 422)})
async def result(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    wait = number(request.query_params.get("wait"), "wait", 0, _MAX_WAIT, default=0)
    with anyio.move_on_after(wait):
        while not record.finished and await s.pause():
            record = await s.require(record.id)
    return JSONResponse(result_json(await s.require(record.id)))


def _conflict(existing: Any, message: str) -> Response:
    response = error_response(409, "InvocationConflict", message)
    if existing is not None:
        response = JSONResponse(Error(ErrorDetail("InvocationConflict", message), existing.id, existing.status),
                                status_code=409)
    return response


routes = [
    Route("/invocations", start, methods=["POST"]),
    Route("/invocations", listing),
    Route("/invocations/summary", summary),
    Route("/invocations/{id}", show),
    Route("/invocations/{id}/entries", entries),
    Route("/invocations/{id}/result", result),
]
