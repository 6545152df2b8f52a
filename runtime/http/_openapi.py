"""The OpenAPI 3.1 document served at `/openapi.json`: its schemas generated from the body
types of `models` (which the routes decode and encode with), its paths written beside them."""

from __future__ import annotations

from typing import Any

import msgspec

from journal import Status

from .models import (
    ANSWERS,
    REQUESTS,
    Backfilled,
    BackfillRequest,
    CancelRequest,
    Entries,
    Error,
    Forked,
    ForkRequest,
    Health,
    Invocation,
    KeyState,
    Limit,
    LimitRequest,
    Limits,
    Page,
    PauseRequest,
    PromiseRequest,
    Result,
    RetryRequest,
    Schedule,
    ScheduleRequest,
    Schedules,
    Started,
    StartRequest,
    Triggered,
)

_TEMPLATE = "#/components/schemas/{name}"


def _ref(model: type) -> dict[str, str]:
    return {"$ref": _TEMPLATE.format(name=model.__name__)}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _body(model: type, required: bool = False) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(model)}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {400: "malformed JSON or an invalid id", 401: "missing or wrong bearer token",
            403: "not application/json, or sent from another web page's origin",
            404: "unknown invocation, promise or limit", 409: "conflict with what is already recorded (or the record is damaged: CorruptEntry)",
            413: "body over the limit", 421: "a Host the server does not answer to",
            422: "the body or a parameter does not fit",
            503: "the store's server cannot be reached right now (try again after Retry-After seconds)"}
    # Every request may meet the Host check, and every POST the Origin and Content-Type check.
    codes = (*codes, 421) if 401 in codes else codes
    return {str(c): _json(_ref(Error), text[c]) for c in (*codes, 503)}


_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_LIMIT_NAME = {**_NAME, "description": "a limit name, or PREFIX:* for every PREFIX:<anything>"}
_, _SCHEMAS = msgspec.json.schema_components(REQUESTS + ANSWERS, ref_template=_TEMPLATE)

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "journal serve", "version": "1",
             "description": "Start, inspect, resolve, cancel, resume, fork and retry durable invocations (docs/http.md)."},
    "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}, "schemas": _SCHEMAS},
    "security": [{"bearer": []}],
    "paths": {
        "/invocations": {
            "post": {"summary": "Start an invocation of a registered handler (idempotent by id)",
                     "requestBody": _body(StartRequest, required=True),
                     "responses": {"201": _json(_ref(Started), "created"),
                                   "200": _json(_ref(Started), "the same id and input exist already"),
                                   **_errors(400, 401, 403, 409, 413, 422)}},
            "get": {"summary": "List invocations, newest first",
                    "parameters": [
                        {"name": "status", "in": "query", "schema": _ref(Status), "description": "repeat or comma-separate"},
                        {"name": "key", "in": "query", "schema": {"type": "string"}},
                        {"name": "handler", "in": "query", "schema": {"type": "string"}},
                        {"name": "q", "in": "query", "schema": {"type": "string"},
                         "description": "text in the id, handler, key or error message (any case)"},
                        {"name": "since", "in": "query", "schema": {"type": "string", "format": "date-time"}},
                        {"name": "until", "in": "query", "schema": {"type": "string", "format": "date-time"}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1,
                                                                    "maximum": 1000, "default": 100}},
                        {"name": "cursor", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": _json(_ref(Page), "a page"), **_errors(400, 401, 422)}},
        },
        "/invocations/{id}": {"get": {"summary": "One invocation, without its entries", "parameters": [_ID],
                                      "responses": {"200": _json(_ref(Invocation), "the invocation"),
                                                    **_errors(400, 401, 404, 409)}}},
        "/invocations/{id}/entries": {"get": {
            "summary": "Its journal entries after a seq", "parameters": [
                _ID, {"name": "after", "in": "query", "schema": {"type": "integer", "default": -1}}],
            "responses": {"200": _json(_ref(Entries), "entries"), **_errors(400, 401, 404, 409)}}},
        "/invocations/{id}/result": {"get": {
            "summary": "Its outcome, waiting up to `wait` seconds for it to finish", "parameters": [
                _ID, {"name": "wait", "in": "query", "schema": {"type": "number", "minimum": 0, "maximum": 300}}],
            "responses": {"200": _json(_ref(Result), "finished, or where it stands when the wait ended"),
                          **_errors(400, 401, 404, 409, 422)}}},
        "/invocations/{id}/events": {"get": {
            "summary": "Server-Sent Events: status, entry, emitted, end", "parameters": [_ID],
            "responses": {"200": {"description": "an event stream", "content": {"text/event-stream": {}}},
                          **_errors(400, 401, 404)}}},
        "/invocations/{id}/promises/{name}": {"post": {
            "summary": "Resolve (value) or reject (reject) a promise", "parameters": [
                _ID, {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "requestBody": _body(PromiseRequest),
            "responses": {"200": _json(_ref(Started), "delivered (or already delivered the same way)"),
                          **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/invocations/{id}/cancel": {"post": {
            "summary": "Ask the invocation to cancel (with rollback: and undo its key's state changes); "
                       "this server, or the worker that runs it, delivers it", "parameters": [_ID],
            "requestBody": _body(CancelRequest),
            "responses": {"202": _json(_ref(Started), "recorded"), **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/invocations/{id}/resume": {"post": {
            "summary": "Run it in this server: a pending invocation, or a running one whose owner is gone",
            "parameters": [_ID],
            "responses": {"202": _json(_ref(Started), "this server runs it"),
                          **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/invocations/{id}/fork": {"post": {
            "summary": "Copy entries 0 to at-1 into a new pending invocation (as journal fork), with edited values",
            "parameters": [_ID],
            "requestBody": _body(ForkRequest, required=True),
            "responses": {"201": _json(_ref(Forked), "the fork, pending"),
                          **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/invocations/{id}/retry": {"post": {
            "summary": "Fork a failed invocation just before its failing step, and run the fork here "
                       "(409 if a retry of it is running or completed, unless force)",
            "parameters": [_ID],
            "requestBody": _body(RetryRequest),
            "responses": {"201": _json(_ref(Forked), "the fork, started"),
                          **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/keys/{key}/state": {"get": {
            "summary": "A key's durable state and the queue of its unfinished invocations",
            "parameters": [{"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json(_ref(KeyState), "the state"), **_errors(400, 401)}}},
        "/limits": {"get": {
            "summary": "Every limit: its rule, units in use, waiters, tokens used, pauses (journal limit ls)",
            "responses": {"200": _json(_ref(Limits), "the limits"), **_errors(401)}}},
        "/limits/{name}": {
            "put": {"summary": "Set the rule of a limit (journal limit set), replacing the one it had",
                    "parameters": [_LIMIT_NAME], "requestBody": _body(LimitRequest, required=True),
                    "responses": {"200": _json(_ref(Limit), "the limit as it is now"),
                                  **_errors(400, 401, 403, 413, 422)}},
            "delete": {"summary": "Remove the rule of a limit (journal limit rm): what waits on it goes on",
                       "parameters": [_LIMIT_NAME],
                       "responses": {"200": _json(_ref(Limit), "the limit removed"),
                                     **_errors(400, 401, 403, 404)}}},
        "/schedules": {"get": {"summary": "Every schedule", "responses": {
            "200": _json(_ref(Schedules), "the schedules"), **_errors(401)}}},
        "/schedules/{name}": {
            "get": {"summary": "One schedule: its rule, next run, last runs and skipped ticks", "parameters": [_NAME],
                    "responses": {"200": _json(_ref(Schedule), "the schedule"), **_errors(401, 404)}},
            "put": {"summary": "Add a schedule, or change the one of that name", "parameters": [_NAME],
                    "requestBody": _body(ScheduleRequest, required=True),
                    "responses": {"201": _json(_ref(Schedule), "added"), "200": _json(_ref(Schedule), "changed"),
                                  **_errors(400, 401, 403, 413, 422)}},
            "delete": {"summary": "Remove a schedule (its invocations stay)", "parameters": [_NAME],
                       "responses": {"204": {"description": "removed"}, **_errors(401, 403, 404)}}},
        "/schedules/{name}/pause": {"post": {
            "summary": "Stop firing it, with a note", "parameters": [_NAME], "requestBody": _body(PauseRequest),
            "responses": {"200": _json(_ref(Schedule), "paused"), **_errors(400, 401, 403, 404, 413, 422)}}},
        "/schedules/{name}/resume": {"post": {
            "summary": "Fire it again", "parameters": [_NAME],
            "responses": {"200": _json(_ref(Schedule), "resumed"), **_errors(400, 401, 403, 404, 413)}}},
        "/schedules/{name}/trigger": {"post": {
            "summary": "Start one run now", "parameters": [_NAME],
            "responses": {"202": _json(_ref(Triggered), "started"), **_errors(400, 401, 403, 404, 413)}}},
        "/schedules/{name}/backfill": {"post": {
            "summary": "Start the ticks of [from, to) not started yet", "parameters": [_NAME],
            "requestBody": _body(BackfillRequest, required=True),
            "responses": {"202": _json(_ref(Backfilled), "the ticks"), **_errors(400, 401, 403, 404, 413, 422)}}},
        "/healthz": {"get": {"summary": "Liveness", "responses": {"200": _json(_ref(Health), "serving"),
                                                                  **_errors()}}},
        "/openapi.json": {"get": {"summary": "This document", "responses": {"200": _json({"type": "object"}, "")}}},
    },
}
