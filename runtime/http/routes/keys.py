"""A key's (thread's) durable state and the queue of its unfinished invocations."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal.views import state_json

from .._errors import JSONResponse
from .._openapi import errors, json_answer, operation, path_param
from .._params import param
from .._request_checks import checked_id
from .._service import service
from ..models import KeyState


@operation("A key's durable state and the queue of its unfinished invocations", parameters=[path_param("key")],
           responses={"200": json_answer(KeyState, "the state"), **errors(400, 401)})
async def key_state(request: Request) -> Response:
    s = service(request)
    key = checked_id(param(request, "key"), "key")
    return JSONResponse(await s.read(lambda: state_json(key, s.store.state(key), s.store.key_queue(key))))


routes = [Route("/keys/{key}/state", key_state)]
