"""Resolving or rejecting a promise an invocation waits on (a human's approval)."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._errors import ApiError, JSONResponse
from .._openapi import ID, errors, json_answer, json_body, operation, path_param
from .._params import convert, param
from .._request_checks import checked_id, read_json
from .._service import service
from ..models import PromiseRequest, Started


@operation("Resolve (value) or reject (reject) a promise", parameters=[ID, path_param("name")],
           body=json_body(PromiseRequest),
           responses={"200": json_answer(Started, "delivered (or already delivered the same way)"),
                      **errors(400, 401, 403, 404, 409, 413, 422)})
async def settle(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    name = param(request, "name")
    checked_id(name, "promise name")
    body = convert(await read_json(request, s.max_body), PromiseRequest)
    if body.value is not msgspec.UNSET and body.reject is not msgspec.UNSET:
        raise ApiError(400, "AmbiguousBody", 'the body gives both "value" and "reject"; send {"value": ...} to '
                       'resolve the promise or {"reject": MESSAGE} to reject it')
    if body.reject is not msgspec.UNSET:
        record = await s.engine.reject(record.id, name, body.reject, early=body.early)
    else:
        value = None if body.value is msgspec.UNSET else body.value
        record = await s.engine.resolve(record.id, name, value, early=body.early)
    return JSONResponse(Started(record.id, record.status))


routes = [Route("/invocations/{id}/promises/{name}", settle, methods=["POST"])]
