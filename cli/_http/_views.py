"""The JSON documents the API answers with, built from store records (shapes in docs/http.md)."""

from __future__ import annotations

import base64
import re
from typing import Any

from journal import Called, InvocationRecord, Started, Status, Store, decode_entry, decode_value, export

from .. import _render as render
from .._inspect import forked_from
from ._errors import ApiError

_FORK = re.compile(r"`(journal fork \S+ --at \d+)`")


def waiting_on(record: InvocationRecord) -> list[dict[str, Any]]:
    """What a suspended (or queued) invocation waits for: promises, a timer, a child, its turn."""
    if record.status not in (Status.SUSPENDED, Status.PENDING):
        return []
    out: list[dict[str, Any]] = []
    for name in ([record.waiting] if record.waiting else []) + list(record.waiting_any):
        kind, sep, rest = name.partition(":")
        if sep and kind in ("child", "turn"):
            out.append({"kind": kind, "id": rest})
        elif record.status == Status.SUSPENDED:
            out.append({"kind": "promise", "name": name})
    if record.wake_at is not None and record.status == Status.SUSPENDED:
        out.append({"kind": "timer", "until": render.iso(record.wake_at)})
    return out


def detail(store: Store, record: InvocationRecord) -> dict[str, Any]:
    """`journal show --json` without its entries, plus `waiting_on` and, once diverged, the fork command.

    Built here rather than by trimming `invocation_json`, which renders every entry's value:
    158 us for a three-entry journal, growing with the journal; this decodes only the input
    and the entries' kinds (a `GET /invocations/ID` under load, bench/http_load.py).
    """
    input_value, children = None, []
    for seq, data in store.entries(record.id):
        entry = decode_entry(data, invocation_id=record.id, seq=seq)
        if isinstance(entry, Started):
            input_value = decode_value(entry.input)
        elif isinstance(entry, Called):
            children.append(entry.child)
    error = render.error_json(record.error)
    if record.status == Status.DIVERGED and record.divergence and error is None:
        error = {"type": "NondeterminismError", "message": record.divergence, "terminal": False}
    doc = {
        "id": record.id, "handler": record.handler, "status": record.status.value, "key": record.key,
        "parent": record.parent, "created_at": render.iso(record.created_at), "updated_at": render.iso(record.updated_at),
        "input": input_value,
        "result": decode_value(record.result) if record.status == Status.COMPLETED else None,
        "error": error, "waiting": record.waiting, "wake_at": render.iso(record.wake_at),
        "children": list(dict.fromkeys(children)), "continued_from": record.continued_from,
        "continued_as": record.continued_as,
        "forked_from": forked_from(store, record) if record.parent else None,  # type: ignore[arg-type]
    }
    doc["waiting_on"] = waiting_on(record)
    doc["divergence"] = record.divergence
    found = _FORK.search(record.divergence or "")
    doc["fork_command"] = found.group(1) if found else None
    return doc


def result(record: InvocationRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "status": record.status.value,
        "result": decode_value(record.result) if record.status == Status.COMPLETED else None,
        "error": render.error_json(record.error),
    }


def entries(store: Store, invocation_id: str, after: int) -> list[dict[str, Any]]:
    return [e for e in export(store, invocation_id) if e["seq"] > after]


# -- listing -------------------------------------------------------------------------------------


def page(store: Store, statuses: list[Status], key: str | None, limit: int,
         cursor: str | None) -> dict[str, Any]:
    """Newest first; `next_cursor` continues after the last invocation of this page."""
    records = [r for s in statuses for r in store.list(s)] if statuses else store.list()
    if key is not None:
        records = [r for r in records if r.key == key]
    records.sort(key=lambda r: (r.created_at, r.id), reverse=True)
    if cursor is not None:
        after = _decode_cursor(cursor)
        records = [r for r in records if (r.created_at, r.id) < after]
    chosen = records[:limit]
    more = len(records) > limit
    return {
        "invocations": [render.record_json(r, store.entry_count(r.id)) for r in chosen],
        "next_cursor": _encode_cursor(chosen[-1]) if more else None,
    }


def _encode_cursor(record: InvocationRecord) -> str:
    return base64.urlsafe_b64encode(f"{record.created_at}:{record.id}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, _, invocation_id = text.partition(":")
        return int(created), invocation_id
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "InvalidCursor", f"cursor {cursor!r} is not one this API returned; "
                       "pass the next_cursor of the previous page, or none for the first page") from None
