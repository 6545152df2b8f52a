"""Validation of the names that become store keys, and finding the invocation a prefix of its id names."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .errors import AmbiguousId, InvalidId, InvocationNotFound

if TYPE_CHECKING:
    from ._store import Store

MAX_ID_BYTES = 200
# NUL separates key parts on disk and control characters make ids impossible to type.
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def validate_id(value: object, what: str = "invocation id") -> bytes:
    """Return the UTF-8 bytes of a valid id, or raise `InvalidId` saying what is wrong."""
    if not isinstance(value, str):
        raise InvalidId(f"{what} must be a string, got {type(value).__name__}: {value!r}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        raw = None
    size = len(raw) if raw is not None else len(value.encode("utf-8", "surrogatepass"))
    if not size:
        raise InvalidId(f"{what} is empty; use 1 to {MAX_ID_BYTES} bytes of UTF-8 text")
    if size > MAX_ID_BYTES:
        raise InvalidId(
            f"{what} {value[:40]!r}... is {size} bytes long; the limit is {MAX_ID_BYTES} bytes of UTF-8"
        )
    if raw is None:
        raise InvalidId(f"{what} {value!r} is not valid UTF-8 text")
    bad = _CONTROL.search(value)
    if bad is not None:
        raise InvalidId(f"{what} {value!r} contains the control character {bad.group()!r}; use printable text")
    return raw


# How many of the ids an ambiguous prefix starts are named in the error.
_SHOWN = 10


def expand_id(store: Store, text: str) -> str:
    """The invocation id `text` names: itself if an invocation has that id, else the one id
    that starts with it (`journal show 3f2a` for `3f2a9c01`). Raises `InvocationNotFound`
    when none does and `AmbiguousId`, listing them, when several do. Reads the store's id
    order (`Store.ids_starting`), never every record."""
    validate_id(text)
    if store.get(text) is not None:
        return text
    found = store.ids_starting(text, _SHOWN + 1)
    if len(found) == 1:
        return found[0]
    where = store.path or "this store"
    if not found:
        raise InvocationNotFound(f"no invocation {text!r} (nor one whose id starts with it) in {where}; "
                                 "`journal ls` lists them")
    more = "" if len(found) <= _SHOWN else ", and more"
    raise AmbiguousId(
        f"{text!r} starts the ids of several invocations in {where}: {', '.join(found[:_SHOWN])}{more}; "
        "give more of the id", found[:_SHOWN])
