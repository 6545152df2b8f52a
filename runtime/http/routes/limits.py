"""The store's limits and budgets: listed, set and removed (`journal limit|budget ls|set|rm`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal.limits import LimitError

from .._errors import ApiError, JSONResponse
from .._openapi import errors, json_answer, json_body, operation, path_param
from .._params import convert, param
from .._request_checks import read_json
from .._service import service
from ..models import Budget, BudgetRequest, Budgets, Limit, LimitRequest, Limits, LimitWindow

_LIMIT_NAME = path_param("name", "a limit name, or PREFIX:* for every PREFIX:<anything>")
_SCOPE = path_param("scope", "handler:NAME, key:KEY, tag:K=V or a limit name")


@operation("Every limit: its rule, units in use, waiters, tokens used, pauses (journal limit ls)",
           responses={"200": json_answer(Limits, "the limits"), **errors(401)})
async def list_limits(request: Request) -> Response:
    s = service(request)
    return JSONResponse({"limits": [view.to_json() for view in await s.engine.limits.ls()]})


def _window(spec: LimitWindow | str | None) -> str | tuple[int, float] | None:
    return (spec.limit, spec.period) if isinstance(spec, LimitWindow) else spec


@operation("Set the rule of a limit (journal limit set), replacing the one it had", parameters=[_LIMIT_NAME],
           body=json_body(LimitRequest, required=True),
           responses={"200": json_answer(Limit, "the limit as it is now"), **errors(400, 401, 403, 413, 422)})
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


@operation("Remove the rule of a limit (journal limit rm): what waits on it goes on", parameters=[_LIMIT_NAME],
           responses={"200": json_answer(Limit, "the limit removed"), **errors(400, 401, 403, 404)})
async def delete_limit(request: Request) -> Response:
    s = service(request)
    name = param(request, "name")
    limits = s.engine.limits
    found = await limits.get(name)
    if found is None or not await limits.remove(name):
        raise ApiError(404, "LimitNotFound", f"no limit named {name!r}; GET /limits lists them")
    return JSONResponse(found.to_json())

@operation("Every budget: its allowance and what was used in its window (journal budget ls)",
           responses={"200": json_answer(Budgets, "the budgets"), **errors(401)})
async def list_budgets(request: Request) -> Response:
    s = service(request)
    return JSONResponse({"budgets": [view.to_json() for view in await s.engine.budgets.ls()]})


@operation("Set the budget of a scope (journal budget set), replacing the one it had; its waiters are woken",
           parameters=[_SCOPE], body=json_body(BudgetRequest, required=True),
           responses={"200": json_answer(Budget, "the budget as it is now"), **errors(400, 401, 403, 413, 422)})
async def put_budget(request: Request) -> Response:
    s = service(request)
    scope = param(request, "scope")
    body = convert(await read_json(request, s.max_body), BudgetRequest)
    try:
        view = await s.engine.budgets.set(scope, tokens=body.tokens, cost=body.cost, per=body.per)
    except LimitError as exc:
        raise ApiError(422, "BudgetError", str(exc)) from None
    return JSONResponse(view.to_json())


@operation("Remove the budget of a scope and its usage (journal budget rm): its waiters go on",
           parameters=[_SCOPE],
           responses={"200": json_answer(Budget, "the budget removed"), **errors(400, 401, 403, 404)})
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
