"""Batches: one action over every invocation a filter matches (`journal retry --where ...`),
recorded in the store and carried out here after the answer, then followed by its id."""

from __future__ import annotations

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal import batches
from journal.errors import JournalError

from .._errors import ApiError, JSONResponse
from .._openapi import ID, errors, json_answer, json_body, operation
from .._params import convert, param
from .._request_checks import read_json
from .._service import service
from ..models import BatchProgress, BatchRequest, BatchStarted


@operation("One action (cancel, resume, retry) over every invocation a filter matches, run here",
           body=json_body(BatchRequest, required=True),
           responses={"202": json_answer(BatchStarted, "made; follow it at GET /batches/{id}"),
                      **errors(400, 401, 403, 413, 422)})
async def start(request: Request) -> Response:
    s = service(request)
    body = convert(await read_json(request, s.max_body), BatchRequest)
    try:
        batch = await s.engine.start_batch(body.action, body.filter, check=body.check, dry_run=body.dry_run)
    except JournalError as exc:
        raise ApiError(422, "InvalidBatch", str(exc)) from None
    return JSONResponse(BatchStarted(batch.id, batch.matched), status_code=202,
                        background=BackgroundTask(s.engine.run_batch, batch.id))


@operation("How far a batch got", parameters=[ID],
           responses={"200": json_answer(BatchProgress, "its progress"), **errors(400, 401, 404)})
async def show(request: Request) -> Response:
    s = service(request)
    batch_id = param(request, "id")
    batch = await s.read(batches.load, s.store, batch_id)
    if batch is None:
        raise ApiError(404, "BatchNotFound", f"no batch {batch_id!r}; POST /batches makes one")
    return JSONResponse(await s.read(batches.batch_json, s.store, batch))


routes = [Route("/batches", start, methods=["POST"]), Route("/batches/{id}", show)]
