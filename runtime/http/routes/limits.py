"""The store's limits and budgets: listed, set and removed (`journal limit|budget ls|set|rm`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal.limits import LimitError

from .._errors import ApiError, JSONResponse
from .._params import convert, param
from .._request_checks import read_json
from .._service import service
from ..models import BudgetRequest, LimitRequest, LimitWindow


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

async def list_budgets(request: Request) -> Response:
    s = service(request)
    return JSONResponse({"budgets": [view.to_json() for view in await s.engine.budgets.ls()]})


async def put_budget(request: Request) -> Response:
    s = service(request)
    scope = param(request, "scope")
    body = convert(await read_json(request, s.max_body), BudgetRequest)
    try:
        view = await s.engine.budgets.set(scope, tokens=body.tokens, cost=body.cost, per=body.per)
    except LimitError as exc:
        raise ApiError(422, "BudgetError", str(exc)) from None
    return JSONResponse(view.to_json())


async def delete_budget(request: Request) -> Response:
    s = service(request)
    scope = param(request, "scope")
    budgets = s.engine.budgets
    found = await budgets.get(scope)
    if found is None or not await budgets.remove(scope):
        raise ApiError(404, "BudgetNotFound", f"no budget for {scope!r}; GET /budgets lists them")
    return JSONResponse(found.to_json())


routes = [Route("/limits", list_limits), Route("/limits/{name}", put_limit, methods=["PUT"]),
          Route("/limits/{name}", delete_limit, methods=["DELETE"]), Route("/budgets", list_budgets),
          Route("/budgets/{scope}", put_budget, methods=["PUT"]),
          Route("/budgets/{scope}", delete_budget, methods=["DELETE"])]
