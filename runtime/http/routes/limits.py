"""The store's limits: listed, set and removed (`journal limit ls|set|rm`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal.limits import LimitError

from .._errors import ApiError, JSONResponse
from .._params import convert, param
from .._request_checks import read_json
from .._service import service
from ..models import LimitRequest, LimitWindow


async def list_limits(request: Request) -> Response:
    s = service(request)
    return JSONResponse({"limits": [view.to_json() for view in await s.engine.limits.ls()]})


def _window(spec: LimitWindow | str | None) -> str | tuple[int, float] | None:
    return (spec.limit, spec.period) if isinstance(spec, LimitWindow) else spec


async def put_limit(request: Request) -> Response:
    s = service(request)
    name = param(request, "name")
    body = convert(await read_json(request, s.max_body), LimitRequest)
    try:
        view = await s.engine.limits.set(name, concurrency=body.concurrency, rate=_window(body.rate),
                                         tokens=_window(body.tokens))
    except LimitError as exc:
        raise ApiError(422, "LimitError", str(exc)) from None
    return JSONResponse(view.to_json())


async def delete_limit(request: Request) -> Response:
    s = service(request)
    name = param(request, "name")
    limits = s.engine.limits
    found = await limits.get(name)
    if found is None or not await limits.remove(name):
        raise ApiError(404, "LimitNotFound", f"no limit named {name!r}; GET /limits lists them")
    return JSONResponse(found.to_json())



routes = [Route("/limits", list_limits), Route("/limits/{name}", put_limit, methods=["PUT"]),
          Route("/limits/{name}", delete_limit, methods=["DELETE"])]
