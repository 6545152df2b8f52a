"""Pages of `GET /invocations` (the documents themselves are `journal.views`')."""

from __future__ import annotations

import base64
from typing import Any

from journal import Cursor, Query, Store
from journal.views import listed_json

from ._errors import ApiError

# -- listing -------------------------------------------------------------------------------------


def page(store: Store, query: Query) -> dict[str, Any]:
    """Newest first, from the store's listing index (a page never reads every record);
    `next_cursor` continues after the last invocation of this page."""
    found = store.page(query)
    return {
        "invocations": [listed_json(store, item) for item in found.items],
        "next_cursor": encode_cursor(found.next) if found.next is not None else None,
    }


def encode_cursor(cursor: Cursor) -> str:
    return base64.urlsafe_b64encode(f"{cursor.created_at}:{cursor.id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Cursor:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, _, invocation_id = text.partition(":")
        return Cursor(int(created), invocation_id)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "InvalidCursor", f"cursor {cursor!r} is not one this API returned; "
                       "pass the next_cursor of the previous page, or none for the first page") from None
