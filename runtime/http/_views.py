"""Pages of `GET /invocations` (the documents themselves are `journal.views`')."""

from __future__ import annotations

import base64
from typing import Any

from journal import InvocationRecord, Status, Store
from journal.views import record_json

from ._errors import ApiError

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
        "invocations": [record_json(r, store.entry_count(r.id)) for r in chosen],
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
