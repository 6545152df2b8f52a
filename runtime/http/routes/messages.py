"""Talking to a running invocation: sending it messages, asking it for replies, reading the
values it published. Every answer is read from the store: none needs a worker to be up."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from journal import iso_from_us

from ... import Value
from .._errors import JSONResponse
from .._openapi import ID, errors, json_answer, json_body, operation, path_param, query_param
from .._params import convert, number, param
from .._request_checks import checked_id, read_json
from .._service import Service, service
from ..models import MessageRequest, MessageSent, PublishedAnswer, PublishedValues, ReplyAnswer

_MAX_WAIT = 300  # seconds (an integer: /openapi.json says 300)
T = TypeVar("T")
_TOPIC = path_param("topic")
_WAIT = query_param("wait", {"type": "number", "minimum": 0, "maximum": _MAX_WAIT})


async def _sent(request: Request, *, wants_reply: bool) -> tuple[Service, str, str]:
    s = service(request)
    record = await s.require(param(request, "id"))
    topic = param(request, "topic")
    checked_id(topic, "topic")
    data = await read_json(request, s.max_body)
    body = convert({} if data is None else data, MessageRequest)
    if body.id is not None:
        checked_id(body.id, "message id")
    if wants_reply:
        message_id = (await s.engine.request(record.id, topic, body.value, wait=0, message_id=body.id)).message_id
    else:
        message_id = await s.engine.send_message(record.id, topic, body.value, message_id=body.id)
    return s, record.id, message_id


@operation("Send a message on a topic (the handler's ctx.receive(topic) gets it, in arrival order); "
           "the same id twice is delivered once", parameters=[ID, _TOPIC], body=json_body(MessageRequest),
           responses={"202": json_answer(MessageSent, "in the invocation's inbox"),
                      **errors(400, 401, 403, 404, 409, 413, 422)})
async def send(request: Request) -> Response:
    s, invocation_id, message_id = await _sent(request, wants_reply=False)
    record = await s.require(invocation_id)
    return JSONResponse(MessageSent(message_id, record.status), status_code=202)


@operation("Send a message that asks for a reply, and wait up to `wait` seconds for it",
           parameters=[ID, _TOPIC, _WAIT], body=json_body(MessageRequest),
           responses={"200": json_answer(ReplyAnswer, "the handler replied"),
                      "202": json_answer(MessageSent, "sent; the wait ended before the reply: read it later at "
                                                      "/invocations/{id}/replies/{message_id}"),
                      **errors(400, 401, 403, 404, 409, 413, 422)})
async def ask(request: Request) -> Response:
    wait = number(request.query_params.get("wait"), "wait", 0, _MAX_WAIT, default=0)
    s, invocation_id, message_id = await _sent(request, wants_reply=True)
    return await _answer(s, invocation_id, message_id, wait)


@operation("The reply to a request, waiting up to `wait` seconds for it",
           parameters=[ID, path_param("message_id"), _WAIT],
           responses={"200": json_answer(ReplyAnswer, "the handler replied"),
                      "202": json_answer(MessageSent, "no reply yet"), **errors(400, 401, 404, 409, 422)})
async def reply(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    message_id = param(request, "message_id")
    checked_id(message_id, "message id")
    wait = number(request.query_params.get("wait"), "wait", 0, _MAX_WAIT, default=0)
    return await _answer(s, record.id, message_id, wait)


async def _answer(s: Service, invocation_id: str, message_id: str, wait: float) -> Response:
    """200 with the reply once it is committed; 202 with the message id if the wait ends first
    (or the server stops meanwhile)."""
    answer = await _until_stopping(s, s.engine.reply(invocation_id, message_id, wait=wait))
    if answer is None or not answer.replied:
        answer = await s.engine.reply(invocation_id, message_id)
    if answer.replied:
        return JSONResponse(ReplyAnswer(message_id, answer.value))
    record = await s.require(invocation_id)
    return JSONResponse(MessageSent(message_id, record.status), status_code=202)


async def _until_stopping(s: Service, wait: Awaitable[T]) -> T | None:
    """What `wait` gives, or None if the server stops first (a long poll does not hold it up)."""
    got: list[T] = []
    failed: list[Exception] = []
    async with anyio.create_task_group() as tg:

        async def stop() -> None:
            await s.stopping.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(stop)
        try:
            got.append(await wait)
        except Exception as exc:  # raised as itself, not in the task group's exception group
            failed.append(exc)
        tg.cancel_scope.cancel()
    if failed:
        raise failed[0]
    return got[0] if got else None


def _published(found: Value) -> PublishedAnswer:
    return PublishedAnswer(found.name, found.value, found.seq, iso_from_us(found.at) or "")


@operation("The latest value published under a name, from the store (no worker needed); with `wait`, "
           "waiting for a newer one than `after` (a seq) or than the current one",
           parameters=[ID, path_param("name"), _WAIT,
                       query_param("after", {"type": "integer", "minimum": 0})],
           responses={"200": json_answer(PublishedAnswer, "the value"), **errors(400, 401, 404, 409, 422)})
async def value(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    name = param(request, "name")
    checked_id(name, "value name")
    query = request.query_params
    wait = number(query.get("wait"), "wait", 0, _MAX_WAIT, default=0) if "wait" in query else None
    after = int(number(query.get("after"), "after", 0, 2**31, default=0, integer=True)) if "after" in query else None
    found = await _until_stopping(s, s.engine.get_value(record.id, name, wait=wait, after=after))
    if found is None:  # the server stops: what is there now
        found = await s.engine.get_value(record.id, name)
    return JSONResponse(_published(found))


@operation("Every value the invocation published (the latest under each name), from the store",
           parameters=[ID], responses={"200": json_answer(PublishedValues, "the values"), **errors(400, 401, 404, 409)})
async def values(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    found = await s.engine.values(record.id)
    return JSONResponse(PublishedValues({name: _published(v) for name, v in found.items()}))


routes = [
    Route("/invocations/{id}/messages/{topic}", send, methods=["POST"]),
    Route("/invocations/{id}/requests/{topic}", ask, methods=["POST"]),
    Route("/invocations/{id}/replies/{message_id}", reply, methods=["GET"]),
    Route("/invocations/{id}/values", values, methods=["GET"]),
    Route("/invocations/{id}/values/{name}", value, methods=["GET"]),
]
