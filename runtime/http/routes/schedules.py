"""Schedules: list, read, add or change, remove, pause, resume, trigger, backfill
(`engine.schedules`; the same rules and messages as `journal schedule`)."""

from __future__ import annotations

import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal.views import schedule_json

from .._errors import ApiError, JSONResponse
from .._openapi import errors, json_answer, json_body, operation, path_param
from .._params import convert, param
from .._request_checks import read_json
from .._service import service
from ..models import Backfilled, BackfillRequest, PauseRequest, Schedule, ScheduleRequest, Schedules, Triggered

_NAME = path_param("name")


def _instant(text: str | None, name: str) -> datetime.datetime | None:
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise ApiError(422, "InvalidInput", f"{name} {text!r} is not an ISO 8601 time with a zone; "
                       'e.g. "2030-01-01T09:00:00Z"')
    return when


async def _doc(request: Request, name: str) -> dict[str, Any]:
    s = service(request)
    try:
        record = await s.engine.schedules.get(name)
    except LookupError as exc:
        raise ApiError(404, "ScheduleNotFound", str(exc).strip("'\"")) from None
    return await s.read(schedule_json, s.store, record)


async def _act(request: Request, work: Any) -> Any:
    try:
        return await work
    except LookupError as exc:
        raise ApiError(404, "ScheduleNotFound", str(exc).strip("'\"")) from None
    except ValueError as exc:
        raise ApiError(422, "InvalidInput", str(exc)) from None


@operation("Every schedule", responses={"200": json_answer(Schedules, "the schedules"), **errors(401)})
async def listing(request: Request) -> Response:
    s = service(request)
    records = await s.engine.schedules.list()
    return JSONResponse({"schedules": [await s.read(schedule_json, s.store, r) for r in records]})


@operation("One schedule: its rule, next run, last runs and skipped ticks", parameters=[_NAME],
           responses={"200": json_answer(Schedule, "the schedule"), **errors(401, 404)})
async def show(request: Request) -> Response:
    return JSONResponse(await _doc(request, param(request, "name")))


@operation("Add a schedule, or change the one of that name", parameters=[_NAME],
           body=json_body(ScheduleRequest, required=True),
           responses={"201": json_answer(Schedule, "added"), "200": json_answer(Schedule, "changed"),
                      **errors(400, 401, 403, 413, 422)})
async def put(request: Request) -> Response:
    s = service(request)
    name = param(request, "name")
    body = convert(await read_json(request, s.max_body), ScheduleRequest)
    existed = await s.read(s.store.schedule, name) is not None
    await _act(request, s.engine.schedules.add(
        name, body.target, cron=body.cron, every=body.every, input=body.input, key=body.key, tz=body.tz,
        overlap=body.overlap, catch_up=body.catch_up, jitter=body.jitter,
        start_at=_instant(body.start_at, "start_at"), end_at=_instant(body.end_at, "end_at"),
        priority=body.priority, limit=body.limit, replace=True))
    return JSONResponse(await _doc(request, name), status_code=200 if existed else 201)


@operation("Remove a schedule (its invocations stay)", parameters=[_NAME],
           responses={"204": {"description": "removed"}, **errors(401, 403, 404)})
async def delete(request: Request) -> Response:
    s = service(request)
    await _act(request, s.engine.schedules.remove(param(request, "name")))
    return Response(status_code=204)


@operation("Stop firing it, with a note", parameters=[_NAME], body=json_body(PauseRequest),
           responses={"200": json_answer(Schedule, "paused"), **errors(400, 401, 403, 404, 413, 422)})
async def pause(request: Request) -> Response:
    s = service(request)
    data = await read_json(request, s.max_body)
    body = convert({} if data is None else data, PauseRequest)
    name = param(request, "name")
    await _act(request, s.engine.schedules.pause(name, body.note))
    return JSONResponse(await _doc(request, name))


@operation("Fire it again", parameters=[_NAME],
           responses={"200": json_answer(Schedule, "resumed"), **errors(400, 401, 403, 404, 413)})
async def resume(request: Request) -> Response:
    s = service(request)
    await read_json(request, s.max_body)
    name = param(request, "name")
    await _act(request, s.engine.schedules.resume(name))
    return JSONResponse(await _doc(request, name))


@operation("Start one run now", parameters=[_NAME],
           responses={"202": json_answer(Triggered, "started"), **errors(400, 401, 403, 404, 413)})
async def trigger(request: Request) -> Response:
    s = service(request)
    await read_json(request, s.max_body)
    return JSONResponse(Triggered(await _act(request, s.engine.schedules.trigger(param(request, "name")))),
                        status_code=202)


@operation("Start the ticks of [from, to) not started yet", parameters=[_NAME],
           body=json_body(BackfillRequest, required=True),
           responses={"202": json_answer(Backfilled, "the ticks"), **errors(400, 401, 403, 404, 413, 422)})
async def backfill(request: Request) -> Response:
    s = service(request)
    body = convert(await read_json(request, s.max_body), BackfillRequest)
    start, end = _instant(body.from_, "from"), _instant(body.to, "to")
    assert start is not None and end is not None
    ticks = await _act(request, s.engine.schedules.backfill(param(request, "name"), start, end))
    return JSONResponse(Backfilled([{"id": i, "started": started} for i, started in ticks]), status_code=202)


routes = [
    Route("/schedules", listing),
    Route("/schedules/{name}", show, methods=["GET"]),
    Route("/schedules/{name}", put, methods=["PUT"]),
    Route("/schedules/{name}", delete, methods=["DELETE"]),
    Route("/schedules/{name}/pause", pause, methods=["POST"]),
    Route("/schedules/{name}/resume", resume, methods=["POST"]),
    Route("/schedules/{name}/trigger", trigger, methods=["POST"]),
    Route("/schedules/{name}/backfill", backfill, methods=["POST"]),
]
