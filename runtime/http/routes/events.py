"""`GET /invocations/{id}/events`: the invocation's journal as Server-Sent Events.

Events: `status` (at once, then on every change), `entry` (each journaled entry, as in
`show --json`), `emitted` (what `ctx.emit` published: `{"seq", "value", "at"}`), and `end`
once it finished. Each entry is sent once, in seq order even when concurrent branches
commit out of order, as `Engine.stream` delivers them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from journal import decode_entry, entry_view
from journal.errors import CorruptEntry
from journal.views import corrupt_view, result_json, waiting_on

from .._params import param
from .._service import service

if TYPE_CHECKING:
    from .._service import Service

_json = msgspec.json.Encoder(enc_hook=repr)


def _event(name: str, data: Any) -> bytes:
    # JSON has no raw newlines, so one `data:` line carries the whole document.
    return b"event: " + name.encode() + b"\ndata: " + _json.encode(data) + b"\n\n"


async def stream(service: Service, invocation_id: str) -> AsyncIterator[bytes]:
    store = service.store
    delivered: set[int] = set()
    floor = -1  # every seq up to here was sent
    last_status: tuple[Any, ...] | None = None
    while True:
        record = await service.read(store.get, invocation_id)
        if record is None:  # trimmed while we watched
            yield _event("end", {"id": invocation_id, "status": None})
            return
        for seq, data in await service.read(store.entries, invocation_id, floor + 1):
            if seq in delivered:
                continue
            try:
                view = entry_view(decode_entry(data, invocation_id=invocation_id, seq=seq), seq)
            except CorruptEntry as exc:
                view = corrupt_view(seq, exc)
            yield _event("entry", view)
            if view["kind"] == "emitted":
                yield _event("emitted", {"seq": seq, "value": view.get("value"), "at": view["at"]})
            delivered.add(seq)
            while floor + 1 in delivered:
                floor += 1
                delivered.discard(floor)
        status = (record.status.value, record.waiting, tuple(record.waiting_any), record.wake_at)
        if status != last_status:
            last_status = status
            yield _event("status", {"id": record.id, "status": record.status.value,
                                    "waiting_on": waiting_on(record), "continued_as": record.continued_as})
        if record.finished:
            yield _event("end", result_json(record))
            return
        if not await service.pause():
            return


async def events(request: Request) -> Response:
    s = service(request)
    record = await s.require(param(request, "id"))
    return StreamingResponse(stream(s, record.id), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


routes = [Route("/invocations/{id}/events", events)]
