"""What an operator does to an invocation: cancel it, resume it here, fork it, retry it.

Each is also a `journal` command, with the same rules: the checks are the library's
(`journal.fork`, `runtime.operations`), and so are the messages.
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal import ForkError, InvocationRecord, UnencodableValue, encode_value, fork

from ...errors import HandlerNotFound
from ...operations import NotResumable, NotRetryable, check_resumable, retry
from .. import _service
from .._errors import ApiError, JSONResponse
from .._guard import checked_id, read_json
from .._params import convert, param
from .._service import service


class CancelRequest(msgspec.Struct, forbid_unknown_fields=True):
    rollback: bool = False


class ForkRequest(msgspec.Struct, forbid_unknown_fields=True):
    at: int
    values: dict[str, Any] = msgspec.field(default_factory=dict, name="set")
    new_id: str | None = None


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
    return JSONResponse({"id": outcome.id, "status": outcome.status.value}, status_code=202, background=task)


async def resume(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    await read_json(request, s.max_body)  # nothing is expected, but a body is still bounded
    try:
        await s.read(check_resumable, s.store, record)
    except NotResumable as exc:
        raise ApiError(409, "NotResumable", str(exc)) from None
    if not _runs_here(s, record):
        raise ApiError(422, "HandlerNotRegistered",
                       f"invocation {record.id!r} records handler {record.handler!r}, which this server was not "
                       f"given; start it with --handler {record.handler}=TARGET, or run `journal resume` where "
                       "its code is")
    return JSONResponse({"id": record.id, "status": record.status.value}, status_code=202,
                        background=BackgroundTask(s.run_here, record.id))


async def fork_route(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    body = convert(_body(await read_json(request, s.max_body)), ForkRequest)
    if body.new_id is not None:
        checked_id(body.new_id, "new invocation id")
    values: dict[int, bytes] = {}
    for text, value in body.values.items():
        if not text.isdigit():
            raise ApiError(422, "InvalidBody", f'"set" maps a seq to a value; {text!r} is not a seq '
                           '(for example {"set": {"2": "a better plan"}})')
        try:
            values[int(text)] = bytes(encode_value(value))
        except UnencodableValue as exc:  # (JSON always encodes; kept for a value too large)
            raise ApiError(422, "InvalidBody", f"the value for seq {text} cannot be journaled: {exc}") from None
    forked = await _copy(s, lambda: fork(s.store, record.id, at=body.at, new_id=body.new_id, values=values))
    return JSONResponse({"id": forked.id, "status": forked.status.value, "parent": record.id, "at": body.at},
                        status_code=201)


async def retry_route(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    await read_json(request, s.max_body)
    try:
        forked = await _copy(s, lambda: retry(s.store, record.id))
    except NotRetryable as exc:
        raise ApiError(409, "NotRetryable", str(exc)) from None
    task = BackgroundTask(s.run_here, forked.id) if _runs_here(s, forked) else None
    return JSONResponse({"id": forked.id, "status": forked.status.value, "parent": record.id}, status_code=201,
                        background=task)


async def _copy(s: _service.Service, make: Any) -> InvocationRecord:
    """Run a fork (two store transactions and a sync) off the event loop; a fork point or a
    value that does not fit the journal is 422, as `journal fork` exits 2."""

    def work() -> InvocationRecord:
        made: InvocationRecord = make()
        s.store.sync()
        return made

    try:
        return await anyio.to_thread.run_sync(work)
    except ForkError as exc:
        raise ApiError(422, "ForkError", str(exc)) from None


routes = [
    Route("/invocations/{id}/cancel", cancel, methods=["POST"]),
    Route("/invocations/{id}/resume", resume, methods=["POST"]),
    Route("/invocations/{id}/fork", fork_route, methods=["POST"]),
    Route("/invocations/{id}/retry", retry_route, methods=["POST"]),
]
