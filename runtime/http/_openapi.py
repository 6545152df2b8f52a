"""The OpenAPI 3.1 document served at `/openapi.json` (kept beside the routes it describes)."""

from __future__ import annotations

from typing import Any


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {400: "malformed JSON or an invalid id", 401: "missing or wrong bearer token",
            403: "not application/json, or sent from another web page's origin",
            404: "unknown invocation or promise", 409: "conflict with what is already recorded (or the record is damaged: CorruptEntry)",
            413: "body over the limit", 421: "a Host the server does not answer to",
            422: "the body or a parameter does not fit",
            503: "the store's server cannot be reached right now (try again after Retry-After seconds)"}
    # Every request may meet the Host check, and every POST the Origin and Content-Type check.
    codes = (*codes, 421) if 401 in codes else codes
    return {str(c): _json(_ref("Error"), text[c]) for c in (*codes, 503)}


_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_STATUS = {"type": "string", "enum": ["pending", "running", "suspended", "diverged", "completed", "failed",
                                      "cancelled"]}
_FRAME = {"type": "object", "properties": {"file": {"type": "string"}, "line": {"type": "integer"},
                                           "function": {"type": "string"}}}
_ERROR_INFO = {"type": ["object", "null"], "properties": {"type": {"type": "string"}, "message": {"type": "string"},
                                                          "terminal": {"type": "boolean"},
                                                          "traceback": {"type": "array", "items": _FRAME}}}
# Only while running: who holds the lease, and whether it is known to be alive.
_OWNER = {"type": "object", "properties": {"host": {"type": ["string", "null"]}, "pid": {"type": ["integer", "null"]},
                                           "alive": {"type": "boolean"}}}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "journal serve", "version": "1",
             "description": "Start, inspect, resolve, cancel, resume, fork and retry durable invocations (docs/http.md)."},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["type", "message"],
                "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}},
            "StartRequest": {"type": "object", "required": ["handler"], "additionalProperties": False, "properties": {
                "handler": {"type": "string", "description": "a NAME registered with --handler NAME=TARGET"},
                "input": {}, "id": {"type": "string"}, "key": {"type": "string"},
                "durability": {"type": "string", "enum": ["sync", "async", "exit"]}}},
            "Started": {"type": "object", "properties": {"id": {"type": "string"}, "status": _STATUS}},
            # A record that does not decode is listed too: status `damaged`, what is wrong in
            # `damaged`, and null for what could not be read.
            "Summary": {"type": "object", "required": ["id", "status"], "properties": {
                "id": {"type": "string"}, "handler": {"type": ["string", "null"]},
                "status": {"type": "string", "enum": [*_STATUS["enum"], "damaged"]},
                "key": {"type": ["string", "null"]}, "created_at": {"type": ["string", "null"], "format": "date-time"},
                "updated_at": {"type": ["string", "null"], "format": "date-time"}, "entries": {"type": "integer"},
                "owner": _OWNER, "damaged": {"type": "string"}}},
            "WaitingOn": {"type": "object", "required": ["kind"], "properties": {
                "kind": {"type": "string", "enum": ["promise", "timer", "child", "turn", "handler"]},
                "name": {"type": "string"}, "until": {"type": "string", "format": "date-time"},
                "id": {"type": "string"},
                "type": {"type": "string", "description": "a typed promise: its type, as the code spells it"},
                "schema": {"type": "object", "description": "a typed promise: its JSON Schema"},
                "example": {"description": "a typed promise: a value that fits its schema"}}},
            "Invocation": {"type": "object", "properties": {
                "id": {"type": "string"}, "handler": {"type": "string"}, "status": _STATUS,
                "key": {"type": ["string", "null"]}, "input": {}, "result": {}, "error": _ERROR_INFO,
                "waiting_on": {"type": "array", "items": _ref("WaitingOn")}, "owner": _OWNER,
                "divergence": {"type": ["string", "null"]}, "fork_command": {"type": ["string", "null"]}}},
            "Entry": {"type": "object", "required": ["seq", "kind"], "properties": {
                "seq": {"type": "integer"}, "kind": {"type": "string"}, "name": {"type": ["string", "null"]},
                "at": {"type": ["string", "null"], "format": "date-time"}, "value": {}, "error": {}}},
            "Result": {"type": "object", "properties": {"id": {"type": "string"}, "status": _STATUS,
                                                        "result": {}, "error": _ERROR_INFO}},
            "PromiseRequest": {"type": "object", "additionalProperties": False,
                               "properties": {"value": {}, "reject": {"type": "string"},
                                              "early": {"type": "boolean", "default": False}}},
            "CancelRequest": {"type": "object", "additionalProperties": False, "properties": {
                "rollback": {"type": "boolean", "default": False,
                             "description": "also undo the ctx.state changes it made to its key"}}},
            "ForkRequest": {"type": "object", "required": ["at"], "additionalProperties": False, "properties": {
                "at": {"type": "integer", "minimum": 1,
                       "description": "the fork point: entries 0 to at-1 are copied, the fork runs live from at"},
                "set": {"type": "object", "additionalProperties": {},
                        "description": "new values for recorded steps or promises below at, by seq "
                                       "(as a decimal string)"},
                "new_id": {"type": "string", "description": "default: ID-fork-<6 hex digits>"}}},
            "Forked": {"type": "object", "required": ["id", "status"], "properties": {
                "id": {"type": "string"}, "status": _STATUS, "parent": {"type": "string"},
                "at": {"type": "integer"}}},
        },
    },
    "security": [{"bearer": []}],
    "paths": {
        "/invocations": {
            "post": {"summary": "Start an invocation of a registered handler (idempotent by id)",
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": _ref("StartRequest")}}},
                     "responses": {"201": _json(_ref("Started"), "created"),
                                   "200": _json(_ref("Started"), "the same id and input exist already"),
                                   **_errors(400, 401, 403, 409, 413, 422)}},
            "get": {"summary": "List invocations, newest first",
                    "parameters": [
                        {"name": "status", "in": "query", "schema": _STATUS, "description": "repeat or comma-separate"},
                        {"name": "key", "in": "query", "schema": {"type": "string"}},
                        {"name": "handler", "in": "query", "schema": {"type": "string"}},
                        {"name": "q", "in": "query", "schema": {"type": "string"},
                         "description": "text in the id, handler, key or error message (any case)"},
                        {"name": "since", "in": "query", "schema": {"type": "string", "format": "date-time"}},
                        {"name": "until", "in": "query", "schema": {"type": "string", "format": "date-time"}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1,
                                                                    "maximum": 1000, "default": 100}},
                        {"name": "cursor", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": _json({"type": "object", "properties": {
                        "invocations": {"type": "array", "items": _ref("Summary")},
                        "next_cursor": {"type": ["string", "null"]}}}, "a page"), **_errors(400, 401, 422)}},
        },
        "/invocations/{id}": {"get": {"summary": "One invocation, without its entries", "parameters": [_ID],
                                      "responses": {"200": _json(_ref("Invocation"), "the invocation"),
                                                    **_errors(400, 401, 404, 409)}}},
        "/invocations/{id}/entries": {"get": {
            "summary": "Its journal entries after a seq", "parameters": [
                _ID, {"name": "after", "in": "query", "schema": {"type": "integer", "default": -1}}],
            "responses": {"200": _json({"type": "object", "properties": {
                "entries": {"type": "array", "items": _ref("Entry")}}}, "entries"), **_errors(400, 401, 404, 409)}}},
        "/invocations/{id}/result": {"get": {
            "summary": "Its outcome, waiting up to `wait` seconds for it to finish", "parameters": [
                _ID, {"name": "wait", "in": "query", "schema": {"type": "number", "minimum": 0, "maximum": 300}}],
            "responses": {"200": _json(_ref("Result"), "finished, or where it stands when the wait ended"),
                          **_errors(400, 401, 404, 409, 422)}}},
        "/invocations/{id}/events": {"get": {
            "summary": "Server-Sent Events: status, entry, emitted, end", "parameters": [_ID],
            "responses": {"200": {"description": "an event stream", "content": {"text/event-stream": {}}},
                          **_errors(400, 401, 404)}}},
        "/invocations/{id}/promises/{name}": {"post": {
            "summary": "Resolve (value) or reject (reject) a promise", "parameters": [
                _ID, {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "requestBody": {"content": {"application/json": {"schema": _ref("PromiseRequest")}}},
            "responses": {"200": _json(_ref("Started"), "delivered (or already delivered the same way)"),
                          **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/invocations/{id}/cancel": {"post": {
            "summary": "Ask the invocation to cancel (with rollback: and undo its key's state changes); "
                       "this server, or the worker that runs it, delivers it", "parameters": [_ID],
            "requestBody": {"content": {"application/json": {"schema": _ref("CancelRequest")}}},
            "responses": {"202": _json(_ref("Started"), "recorded"), **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/invocations/{id}/resume": {"post": {
            "summary": "Run it in this server: a pending invocation, or a running one whose owner is gone",
            "parameters": [_ID],
            "responses": {"202": _json(_ref("Started"), "this server runs it"),
                          **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/invocations/{id}/fork": {"post": {
            "summary": "Copy entries 0 to at-1 into a new pending invocation (as journal fork), with edited values",
            "parameters": [_ID],
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("ForkRequest")}}},
            "responses": {"201": _json(_ref("Forked"), "the fork, pending"),
                          **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/invocations/{id}/retry": {"post": {
            "summary": "Fork a failed invocation just before its failing step, and run the fork here",
            "parameters": [_ID],
            "responses": {"201": _json(_ref("Forked"), "the fork, started"),
                          **_errors(400, 401, 403, 404, 409, 413)}}},
        "/keys/{key}/state": {"get": {
            "summary": "A key's durable state and the queue of its unfinished invocations",
            "parameters": [{"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json({"type": "object", "properties": {
                "key": {"type": "string"}, "state": {"type": "object"},
                "queue": {"type": "array", "items": {"type": "string"}}}}, "the state"), **_errors(400, 401)}}},
        "/healthz": {"get": {"summary": "Liveness", "responses": {"200": _json({"type": "object"}, "serving"),
                                                                  **_errors()}}},
        "/openapi.json": {"get": {"summary": "This document", "responses": {"200": _json({"type": "object"}, "")}}},
    },
}
