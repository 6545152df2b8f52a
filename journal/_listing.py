"""A page of invocations: what `Store.page` is asked (`Query`) and what it answers (`Page`).

Newest first, by creation time then id. A page never reads every record: each backend
keeps a listing index (in `journal/kv/_listing.py` for the key-value stores) ordered that
way, by status, by handler, by key and by tag, so a filter on one of them reads only the records
it returns (plus one, to know whether there is a next page). The text filter and a second
filter are checked on the records the index leads to, so they may read more.
"""

from __future__ import annotations

import msgspec

from ._records import InvocationRecord, Status


class Cursor(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Where a page ended: the creation time and id of its last invocation."""

    created_at: int
    id: str


class Query(msgspec.Struct, frozen=True, gc=False):
    """Which invocations a page holds. Every filter given must hold (`statuses`: any of them).

    `text` is found, case-insensitively, in the id, the handler, the key or the error
    message; `since` and `until` bound the creation time (µs, `since` <= created_at < `until`);
    `tags` are `(key, value)` pairs the invocation carries, every one of them.
    """

    statuses: tuple[Status, ...] = ()
    handler: str | None = None
    key: str | None = None
    text: str | None = None
    since: int | None = None
    until: int | None = None
    limit: int = 100
    after: Cursor | None = None
    tags: tuple[tuple[str, str], ...] = ()

    def matches(self, record: InvocationRecord) -> bool:
        """Whether `record` passes every filter (the index already chose by one of them)."""
        if self.statuses and record.status not in self.statuses:
            return False
        if self.handler is not None and not handler_matches(self.handler, record.handler):
            return False
        if self.key is not None and record.key != self.key:
            return False
        if self.since is not None and record.created_at < self.since:
            return False
        if self.until is not None and record.created_at >= self.until:
            return False
        if self.tags and any(record.tags.get(k) != v for k, v in self.tags):
            return False
        if self.text:
            needle = self.text.casefold()
            haystack = [record.id, record.handler, record.key or "", record.error.message if record.error else "",
                        record.divergence or ""]
            if not any(needle in part.casefold() for part in haystack):
                return False
        return True


def handler_matches(wanted: str, recorded: str) -> bool:
    """Whether a handler filter names the recorded handler: the same name, or, for a TARGET
    (`path/to/file.py:fn`), the same function in a file whose path ends with the filter's
    path, component by component. So `ops.py:slow` and `examples/ops.py:slow` (what the
    listings show, what a user typed) find `/srv/app/examples/ops.py:slow`, and `s.py:slow`
    does not. A dotted module target matches its dotted tail the same way."""
    if wanted == recorded:
        return True
    path, colon, function = wanted.rpartition(":")
    there, colon_there, function_there = recorded.rpartition(":")
    if not (colon and colon_there) or function != function_there or not path or not there:
        return False
    while path.startswith("./"):
        path = path[2:]
    if not path or path.startswith("/"):
        return path == there
    return there == path or there.endswith("/" + path) or there.endswith("." + path)


class Damaged(msgspec.Struct, frozen=True, gc=False):
    """An invocation whose record does not decode: listed with what is wrong, never skipped
    silently and never stopping the listing of the others."""

    id: str
    error: str
    created_at: int = 0


class HandlerSummary(msgspec.Struct, gc=False):
    """One handler's invocations at a glance: how many of each status, and since when (µs)
    its oldest runnable (pending) one has been waiting (None: none is)."""

    handler: str
    counts: dict[str, int]
    oldest_runnable_at: int | None = None


class Page(msgspec.Struct, gc=False):
    """The invocations of one page, newest first, and where the next page starts (None: last page)."""

    items: list[InvocationRecord | Damaged]
    next: Cursor | None = None


__all__ = ("Cursor", "Damaged", "HandlerSummary", "Page", "Query", "handler_matches")
