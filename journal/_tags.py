"""Tags: `K=V` pairs an operator finds invocations by (`journal ls --tag customer=acme`).

Set at start (`Engine.start(tags=...)`, `--tag`, `"tags"` over HTTP) or by the handler
(`ctx.tag`, journaled), kept in the record and indexed with the listing index
(`journal/kv/_listing.py`), so that a page filtered by a tag reads only the records it
returns. The rules here bound what a tag may be, because each one is an index key and,
in a page's query string, `K:V`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .errors import JournalError

MAX_TAGS = 32  # per invocation: each one is an index key written with the record
MAX_KEY = 64
MAX_VALUE = 256
_KEY = re.compile(r"[A-Za-z0-9_.\-/]+")


def check_tag(key: object, value: object) -> tuple[str, str]:
    """`(key, value)` if they can be a tag; JournalError saying what is wrong otherwise."""
    if not isinstance(key, str) or not _KEY.fullmatch(key) or len(key) > MAX_KEY:
        raise JournalError(
            f"tag key {key!r} is not allowed: use 1-{MAX_KEY} letters, digits or _ . - / (e.g. customer=acme)"
        )
    if not isinstance(value, str) or not value or len(value) > MAX_VALUE or "\x00" in value \
            or not value.isprintable():
        raise JournalError(
            f"tag {key}={value!r}: the value must be 1-{MAX_VALUE} printable characters (e.g. customer=acme)"
        )
    return key, value


def check_tags(tags: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> dict[str, str]:
    """Every tag checked, as a dict (a later value of a key replaces an earlier one)."""
    pairs = (tags.items() if isinstance(tags, Mapping) else tags) if tags is not None else ()
    out = dict(check_tag(k, v) for k, v in pairs)
    if len(out) > MAX_TAGS:
        raise JournalError(f"{len(out)} tags: an invocation has at most {MAX_TAGS}")
    return out


def parse_tag(text: str, sep: str = "=") -> tuple[str, str]:
    """`K=V` (or `K:V` in a query string) as a checked `(key, value)`."""
    key, found, value = text.partition(sep)
    if not found:
        raise JournalError(f"tag {text!r} has no {sep!r}: write it KEY{sep}VALUE, e.g. customer{sep}acme")
    return check_tag(key, value)


__all__ = ("MAX_TAGS", "check_tag", "check_tags", "parse_tag")
