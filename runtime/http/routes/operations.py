"""What an operator does to an invocation: cancel it, resume it here, fork it, retry it.

Each is also a `journal` command, with the same rules: the checks are the engine's
(`Engine.check_resumable`, `Engine.fork`, `Engine.retry`), and so are the messages.
"""

from __future__ import annotations

import shlex
from typing import Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal import AlreadyRetried, ForkError, InvocationRecord, Status
from journal.errors import InvocationConflict

from ... import is_handler_name
from ...errors import HandlerNotFound, NotResumable
from .. import _service
from .._errors import ApiError, JSONResponse
from .._openapi import ID, errors, json_answer, json_body, operation
from .._params import convert, param
from .._request_checks import checked_id, read_json
from .._service import service
from ..models import CancelRequest, Error, ErrorDetail, Forked, ForkRequest, RetryRequest, Started


def _body(data: Any) -> Any:
    """An action's body: an empty one is the same as `{}`."""
    return {} if data is None else data


def _runs_here(s: _service.Service, record: InvocationRecord) -> bool:
    """Whether this server has the code of `record`'s handler (else another worker must run it)."""
    try:
        s.engine.handler_for(record.handler)
    except HandlerNotFound:
        return False
    return True


@operation("Ask the invocation to cancel (with rollback: and undo its key's state changes); "
           "this server, or the worker that runs it, delivers it", parameters=[ID], body=json_body(CancelRequest),
           responses={"202": json_answer(Started, "recorded"), **errors(400, 401, 403, 404, 409, 413, 422)})
async def cancel(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    body = convert(_body(await read_json(request, s.max_body)), CancelRequest)
    outcome = await s.engine.cancel(record.id, run=False, rollback=body.rollback)
    task = None
    after = await s.require(outcome.id)
    if not after.finished and _runs_here(s, after):
        # Unowned (pending, or it was suspended): this server delivers the cancellation.
        task = BackgroundTask(s.run_here, after.id)
    return JSONResponse(Started(outcome.id, outcome.status), status_code=202, background=task)


@operation("Run it in this server: a pending invocation, or a running one whose owner is gone",
           parameters=[ID],
           responses={"202": json_answer(Started, "this server runs it"), **errors(400, 401, 403, 404, 409, 413, 422)})
async def resume(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    await read_json(request, s.max_body)  # nothing is expected, but a body is still bounded
    # The engine's rule (InvocationBusy while its owner lives, NotResumable once finished: 409),
    # and this API's narrower one: a suspended or diverged run is not resumed by a click, since
    # it would stop where it stopped (resolve its promise, or fork it).
    record = await s.engine.check_resumable(record.id)
    if record.status in (Status.SUSPENDED, Status.DIVERGED):
        what = ("resolve the promise it waits on" if record.status == Status.SUSPENDED
                else f"fork it before the step that diverged (`journal fork {record.id} --at SEQ`)")
        raise NotResumable(f"invocation {record.id!r} is {record.status.value}: resuming it would stop where it "
                           f"stopped; {what}")
    if not _runs_here(s, record):
        raise ApiError(422, "HandlerNotRegistered",
                       f"invocation {record.id!r} records handler {record.handler!r}, which this server was not "
                       f"given; start the server with {_handler_hint(record.handler)} (it then takes the invocation "
                       f"over), or run `journal resume {record.id}` where its code is")
    return JSONResponse(Started(record.id, record.status), status_code=202,
                        background=BackgroundTask(s.run_here, record.id))


def _handler_hint(handler: str) -> str:
    """The `journal serve` option that gives a server the code of `handler`: a NAME needs its
    TARGET; a recorded TARGET (what `journal run` records) is its own, as a bare TARGET."""
    if is_handler_name(handler):
        return f"--handler {handler}=path/to/file.py:function"
    return f"--handler {shlex.quote(handler)}"


@operation("Copy entries 0 to at-1 into a new pending invocation (as journal fork), with edited values",
           parameters=[ID], body=json_body(ForkRequest, required=True),
           responses={"201": json_answer(Forked, "the fork, pending"), **errors(400, 401, 403, 404, 409, 413, 422)})
async def fork_route(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    body = convert(_body(await read_json(request, s.max_body)), ForkRequest)
    if body.new_id is not None:
        checked_id(body.new_id, "new invocation id")
    values: dict[int, Any] = {}
    for text, value in body.values.items():
        if not text.isdigit():
            raise ApiError(422, "InvalidBody", f'"set" maps a seq to a value; {text!r} is not a seq '
                           '(for example {"set": {"2": "a better plan"}})')
        values[int(text)] = value
    try:
        forked = await _forking(s.engine.fork(record.id, at=body.at, new_id=body.new_id, values=values))
    except InvocationConflict:  # (the engine's message speaks of the command line's --new-id)
        raise ApiError(409, "InvocationConflict", f"invocation {body.new_id!r} already exists: give the fork "
                       "another new_id, or leave new_id out for a generated one") from None
    return JSONResponse(Forked(forked.id, forked.status, record.id, body.at), status_code=201)


@operation("Fork a failed invocation just before its failing step, and run the fork here "
           "(409 if a retry of it is running or completed, unless force)",
           parameters=[ID], body=json_body(RetryRequest),
           responses={"201": json_answer(Forked, "the fork, started"), **errors(400, 401, 403, 404, 409, 413, 422)})
async def retry_route(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    body = convert(_body(await read_json(request, s.max_body)), RetryRequest)
    if record.status != Status.FAILED:
        raise ApiError(409, "NotRetryable", f"invocation {record.id!r} is {record.status.value}: only a failed "
                       f"invocation is retried; `journal fork {record.id} --at SEQ` starts a new one from its journal")
    try:
        forked = await _forking(s.engine.retry(record.id, force=body.force))
    except AlreadyRetried as exc:  # a second click, or a script that retries every failed one
        message = str(exc).replace(f"`journal retry {record.id} --force`", '{"force": true}')
        return JSONResponse(Error(ErrorDetail("AlreadyRetried", message), exc.retry.id, exc.retry.status),
                            status_code=409)
    task = BackgroundTask(s.run_here, forked.id) if _runs_here(s, forked) else None
    return JSONResponse(Forked(forked.id, forked.status, record.id), status_code=201,
                        background=task)


async def _forking(making: Any) -> InvocationRecord:
    """A fork point or a value that does not fit the journal is 422, as `journal fork` exits 2."""
    try:
        made: InvocationRecord = await making
    except (ForkError, ValueError) as exc:
        raise ApiError(422, "ForkError", str(exc)) from None
    return made


routes = [
    Route("/invocations/{id}/cancel", cancel, methods=["POST"]),
    Route("/invocations/{id}/resume", resume, methods=["POST"]),
    Route("/invocations/{id}/fork", fork_route, methods=["POST"]),
    Route("/invocations/{id}/retry", retry_route, methods=["POST"]),
]
