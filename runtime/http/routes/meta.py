"""The service itself: health, metrics, and the OpenAPI document (`_openapi.document` of the
app's routes, collected once by `create_app`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._errors import ApiError, JSONResponse
from .._openapi import errors, json_answer, operation
from .._service import service
from ..models import Health


@operation("Liveness", responses={"200": json_answer(Health, "serving"), **errors()})
async def healthz(request: Request) -> Response:
    return JSONResponse(Health("ok", service(request).workers))


@operation("This document", responses={"200": json_answer({"type": "object"}, "")})
async def openapi(request: Request) -> Response:
    return JSONResponse(service(request).openapi)


@operation("Prometheus metrics: this process's counters and the store's gauges (docs/observability.md)",
           responses={"200": {"description": "the Prometheus text format", "content": {"text/plain": {}}},
                      **errors(401, 501)})
async def metrics(request: Request) -> Response:
    """The Prometheus text format: this process's counters and the store's gauges, read from
    its counts (docs/observability.md)."""
    s = service(request)
    if s.metrics is None:
        raise ApiError(501, "MetricsUnavailable", "this server has no metrics: install the metrics extra "
                       "(pip install 'journal-agents[metrics]') and start it again")
    body = await s.read(s.metrics.exposition)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


routes = [Route("/healthz", healthz), Route("/openapi.json", openapi), Route("/metrics", metrics)]
