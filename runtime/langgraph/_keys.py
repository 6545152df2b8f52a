"""Order-preserving keys for LangGraph records in the store's tables, and opening a `db` argument.

A key is a series of text parts, each escaped so that a part never runs into the next
one and keys sort part by part: `\\x00` inside a part becomes `\\x00\\xff`, and every part
ends with `\\x00\\x00` (which sorts below anything a longer part could continue with).
"""

from __future__ import annotations

import os
from typing import Any

from journal import Tables, open_store
from journal.errors import StoreError

_END = b"\x00\x00"


def part(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff") + _END


def parts(*texts: str) -> bytes:
    return b"".join(part(t) for t in texts)


def split(key: bytes, count: int) -> tuple[list[str], bytes]:
    """The first `count` parts of `key`, and the bytes after them."""
    out = []
    pos = 0
    for _ in range(count):
        end = key.index(_END, pos)
        # An escaped NUL is `\x00\xff`, never `\x00\x00`, so the first `\x00\x00` ends the part.
        out.append(key[pos:end].replace(b"\x00\xff", b"\x00").decode("utf-8", "surrogatepass"))
        pos = end + 2
    return out, key[pos:]


def open_tables(db: Any) -> tuple[Any, bool]:
    """The store behind `db` and whether we opened it (and so must close it).

    `db` is a directory path (LMDB), a `postgresql://` URL, or a store object that offers
    `journal.Tables`."""
    if isinstance(db, Tables):
        return db, False
    if isinstance(db, (str, os.PathLike)):
        return open_store(os.fspath(db)), True
    raise StoreError(
        f"cannot open {db!r} as a journal store: pass a directory path, a postgresql:// URL, or a store "
        "such as journal.LmdbStore(path) or journal.MemoryStore()"
    )
