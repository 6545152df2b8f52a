"""Resolving or rejecting a promise an invocation waits on (a human's approval)."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal import Status
from journal.views import export, waiting_on

from .._errors import ApiError, JSONResponse
from .._guard import checked_id, read_json
from .._params import convert, param
from .._service import Service, service


class PromiseRequest(msgspec.Struct, forbid_unknown_fields=True):
    value: Any = None
    reject: str | None = None


async def settle(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    name = param(request, "name")
    checked_id(name, "promise name")
    body = convert(await read_json(request, s.max_body), PromiseRequest)
    if not await s.read(_promise_known, s, record, name):
        raise ApiError(404, "PromiseNotFound", _unknown_promise(record, name))
    if body.reject is not None:
        record = await s.engine.reject(record.id, name, body.reject)
    else:
        record = await s.engine.resolve(record.id, name, body.value)
    return JSONResponse({"id": record.id, "status": record.status.value})


def _promise_known(s: Service, record: Any, name: str) -> bool:
    """Whether delivering promise `name` can ever reach the handler (a typo must not vanish)."""
    if name == record.waiting or name in record.waiting_any or s.store.resolution(record.id, name) is not None:
        return True
    if record.status in (Status.PENDING, Status.RUNNING):
        return True  # it may ask for it later: the value waits in the store
    return any(e["kind"] == "promise" and e["name"] == name for e in export(s.store, record.id))


def _unknown_promise(record: Any, name: str) -> str:
    waits = [w["name"] for w in waiting_on(record) if w["kind"] == "promise"]
    now = f"it waits on {', '.join(map(repr, waits))}" if waits else f"it is {record.status.value}"
    return f"invocation {record.id!r} has no promise {name!r}: {now}"


routes = [Route("/invocations/{id}/promises/{name}", settle, methods=["POST"])]
