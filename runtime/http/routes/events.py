"""`GET /invocations/{id}/events`: the invocation's journal as Server-Sent Events.

Events: `status` (at once, then on every change), `entry` (each journaled entry, as in
`show --json`), `emitted` (what `ctx.emit` published: `{"seq", "value", "at"}`), `chunk`
(live output of a running step: `{"seq", "attempt", "index", "data"}`, bytes as base64 with
`"base64": true`), and `end` once it finished. Each entry is sent once, in seq order even
when concurrent branches commit out of order, as `Engine.stream` delivers them; a step's
chunks come before its entry, and wake the stream at once.

Every event carries an `id:`, the stream's position after it: `StreamPosition.text` (the same text
`Engine.stream` gives each item as its `cursor`). A client that
reconnects with it (`Last-Event-ID`, which a browser's EventSource sends by itself, or
`?after=`) receives every entry and chunk after it, and none again; the status comes
again first (it is the invocation's state, not an event of its history).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from journal import Chunk, LiveFeed, decode_entry, entry_view
from journal.errors import CorruptEntry
from journal.views import corrupt_view, result_json, waiting_on
from runtime import StreamPosition

from .._openapi import ID, errors, operation
from .._params import param
from .._service import service

if TYPE_CHECKING:
    from .._service import Service

_json = msgspec.json.Encoder(enc_hook=repr)


def _event(name: str, data: Any, cursor: StreamPosition | None = None) -> bytes:
    # JSON has no raw newlines, so one `data:` line carries the whole document.
    head = b"" if cursor is None else b"id: " + cursor.text().encode() + b"\n"
    return head + b"event: " + name.encode() + b"\ndata: " + _json.encode(data) + b"\n\n"


def _chunk(chunk: Chunk, cursor: StreamPosition) -> bytes | None:
    """The chunk's event, unless the client has seen it (then None)."""
    if cursor.chunk_seen(chunk):
        return None
    cursor.chunks[chunk.seq] = (chunk.epoch, chunk.attempt, chunk.index)
    if isinstance(chunk.data, bytes):
        data = {"seq": chunk.seq, "attempt": chunk.attempt, "index": chunk.index,
                "data": base64.b64encode(chunk.data).decode(), "base64": True}
    else:
        data = {"seq": chunk.seq, "attempt": chunk.attempt, "index": chunk.index, "data": chunk.data}
    return _event("chunk", data, cursor)


async def stream(service: Service, invocation_id: str, cursor: StreamPosition | None = None) -> AsyncIterator[bytes]:
    feed = await service.read(LiveFeed.open, service.store, invocation_id)
    try:
        async for event in _stream(service, invocation_id, feed, cursor or StreamPosition()):
            yield event
    finally:
        feed.close()


async def _stream(service: Service, invocation_id: str, feed: LiveFeed, cursor: StreamPosition) -> AsyncIterator[bytes]:
    store = service.store
    last_status: tuple[Any, ...] | None = None
    while True:
        for chunk in feed.take():  # before the entries: a step's chunks before its entry
            if (event := _chunk(chunk, cursor)) is not None:
                yield event
        record = await service.read(store.get, invocation_id)
        if record is None:  # trimmed while we watched
            yield _event("end", {"id": invocation_id, "status": None})
            return
        for seq, data in await service.read(store.entries, invocation_id, cursor.floor + 1):
            if cursor.seen(seq):
                continue
            try:
                view = entry_view(decode_entry(data, invocation_id=invocation_id, seq=seq), seq)
            except CorruptEntry as exc:
                view = corrupt_view(seq, exc)
            if view["kind"] == "emitted":  # (before its entry, which moves the cursor past both)
                yield _event("emitted", {"seq": seq, "value": view.get("value"), "at": view["at"]})
            cursor.entry(seq)
            yield _event("entry", view, cursor)
        status = (record.status.value, record.waiting, tuple(record.waiting_any), record.wake_at)
        if status != last_status:
            last_status = status
            yield _event("status", {"id": record.id, "status": record.status.value,
                                    "waiting_on": waiting_on(record), "continued_as": record.continued_as}, cursor)
        if record.finished:
            yield _event("end", result_json(record), cursor)
            return
        # Live output wakes the stream at once; the store is read again once a poll interval has passed.
        next_read = anyio.current_time() + service.poll
        while True:
            if not await service.pause(feed, next_read - anyio.current_time()):
                return
            if anyio.current_time() >= next_read:
                break
            for chunk in feed.take():
                if (event := _chunk(chunk, cursor)) is not None:
                    yield event


@operation("Server-Sent Events: status, entry, emitted, end", parameters=[ID],
           responses={"200": {"description": "an event stream", "content": {"text/event-stream": {}}},
                      **errors(400, 401, 404)})
async def events(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    cursor = StreamPosition.parse(request.headers.get("last-event-id") or request.query_params.get("after"))
    return StreamingResponse(stream(s, record.id, cursor), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


routes = [Route("/invocations/{id}/events", events)]
