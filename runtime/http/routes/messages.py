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
from .._params import convert, number, param
from .._request_checks import checked_id, read_json
from .._service import Service, service
from ..models import MessageRequest, MessageSent, PublishedAnswer, PublishedValues, ReplyAnswer

_MAX_WAIT = 300.0
T = TypeVar("T")


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


async def send(request: Request) -> Response:
    s, invocation_id, message_id = await _sent(request, wants_reply=False)
    record = await s.require(invocation_id)
    return JSONResponse(MessageSent(message_id, record.status), status_code=202)


async def ask(request: Request) -> Response:
    wait = number(request.query_params.get("wait"), "wait", 0, _MAX_WAIT, default=0)
    s, invocation_id, message_id = await _sent(request, wants_reply=True)
    return await _answer(s, invocation_id, message_id, wait)


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
