"""The service itself: health, and the OpenAPI document."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._errors import JSONResponse
from .._openapi import OPENAPI
from .._service import service
from ..models import Health


async def healthz(request: Request) -> Response:
    return JSONResponse(Health("ok", service(request).workers))


async def openapi(request: Request) -> Response:
    return JSONResponse(OPENAPI)


routes = [Route("/healthz", healthz), Route("/openapi.json", openapi)]
