"""What an operator does to an invocation: cancel it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._errors import JSONResponse
from .._params import param
from .._service import service


async def cancel(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    outcome = await s.engine.cancel(record.id, run=False)  # the workers deliver it
    return JSONResponse({"id": outcome.id, "status": outcome.status.value}, status_code=202)


routes = [Route("/invocations/{id}/cancel", cancel, methods=["POST"])]
