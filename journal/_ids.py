"""Validation of the names that become store keys."""

from __future__ import annotations

import re

from .errors import InvalidId

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
