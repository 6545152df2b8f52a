"""The OpenAPI 3.1 document served at `/openapi.json`, collected from the routes: each endpoint
declares its operation beside itself with `operation` (summary, parameters, request body,
answers and errors), its path and method are those of its `Route`, and the schemas are
generated from the body types of `models` (which the routes decode and encode with)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import msgspec
from starlette.routing import BaseRoute, Route

from .models import ANSWERS, REQUESTS, Error

_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])

_TEMPLATE = "#/components/schemas/{name}"
_, _SCHEMAS = msgspec.json.schema_components(REQUESTS + ANSWERS, ref_template=_TEMPLATE)
# Each endpoint's operation, as `operation` declared it: a route's path and methods say where it goes.
_OPERATIONS: dict[Callable[..., Any], dict[str, Any]] = {}


def operation(summary: str, responses: dict[str, Any], *, parameters: Sequence[dict[str, Any]] | None = None,
              body: dict[str, Any] | None = None) -> Callable[[_Endpoint], _Endpoint]:
    """Declare the OpenAPI operation of the endpoint it decorates: what `/openapi.json` says of
    every `Route` that serves it (`responses` with `json_answer` and `errors`, `body` with `json_body`)."""
    spec: dict[str, Any] = {"summary": summary}
    if parameters is not None:
        spec["parameters"] = list(parameters)
    if body is not None:
        spec["requestBody"] = body
    spec["responses"] = responses

    def declare(endpoint: _Endpoint) -> _Endpoint:
        _OPERATIONS[endpoint] = spec
        return endpoint

    return declare


def ref(model: type) -> dict[str, str]:
    """A reference to the schema of `model`, one of the body types of `models` (or a type they use)."""
    return {"$ref": _TEMPLATE.format(name=model.__name__)}


def json_answer(model: type | dict[str, Any], description: str) -> dict[str, Any]:
    """An answer whose body is a `model` (or fits a JSON Schema)."""
    schema = model if isinstance(model, dict) else ref(model)
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def json_body(model: type, required: bool = False) -> dict[str, Any]:
    """A request body that is a `model` (`convert` decodes it)."""
    return {"required": required, "content": {"application/json": {"schema": ref(model)}}}


_ERRORS = {400: "malformed JSON or an invalid id", 401: "missing or wrong bearer token",
           403: "not application/json, or sent from another web page's origin",
           404: "unknown invocation, promise or limit",
           409: "conflict with what is already recorded (or the record is damaged: CorruptEntry)",
           413: "body over the limit", 421: "a Host the server does not answer to",
           422: "the body or a parameter does not fit",
           501: "this server lacks what the route needs (GET /metrics: the metrics extra)",
           503: "the store's server cannot be reached right now (try again after Retry-After seconds)"}


def errors(*codes: int) -> dict[str, Any]:
    """The error answers of a route that may answer `codes`, and 503 (the store is away), which any may."""
    # Every request may meet the Host check, and every POST the Origin and Content-Type check.
    codes = (*codes, 421) if 401 in codes else codes
    return {str(c): json_answer(Error, _ERRORS[c]) for c in (*codes, 503)}


def path_param(name: str, description: str | None = None) -> dict[str, Any]:
    """A segment of the path (every one is a string the route checks)."""
    param: dict[str, Any] = {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
    if description is not None:
        param["description"] = description
    return param


def query_param(name: str, schema: dict[str, Any] | None = None, description: str | None = None) -> dict[str, Any]:
    """A parameter of the query string: a string unless `schema` says otherwise."""
    param: dict[str, Any] = {"name": name, "in": "query", "schema": {"type": "string"} if schema is None else schema}
    if description is not None:
        param["description"] = description
    return param


ID = path_param("id")


def document(routes: Iterable[BaseRoute]) -> dict[str, Any]:
    """The OpenAPI document of `routes`: every `Route` in the schema (not the UI's pages) must
    have its `operation`, so a route cannot be served without being documented."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route) or not route.include_in_schema:
            continue
        spec = _OPERATIONS.get(route.endpoint)
        if spec is None:
            raise LookupError(f"the route {route.path} has no OpenAPI operation: declare one beside its endpoint "
                              "with runtime.http._openapi.operation")
        for method in sorted((route.methods or {"GET"}) - {"HEAD"}):
            paths.setdefault(route.path, {})[method.lower()] = spec
    return {
        "openapi": "3.1.0",
        "info": {"title": "journal serve", "version": "1",
                 "description": "Start, inspect, resolve, cancel, resume, fork and retry durable invocations "
                                "(docs/http.md)."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}, "schemas": _SCHEMAS},
        "security": [{"bearer": []}],
        "paths": paths,
    }
