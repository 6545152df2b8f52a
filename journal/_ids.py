"""Validation of the names that become store keys."""

from __future__ import annotations

from .errors import InvalidId

MAX_ID_BYTES = 200


def validate_id(value: object, what: str = "invocation id") -> bytes:
    """Return the UTF-8 bytes of a valid id, or raise `InvalidId` saying what is wrong."""
    if not isinstance(value, str):
        raise InvalidId(f"{what} must be a string, got {type(value).__name__}: {value!r}")
    raw = value.encode("utf-8", "surrogatepass")
    if not raw:
        raise InvalidId(f"{what} is empty; use 1 to {MAX_ID_BYTES} bytes of UTF-8 text")
    if len(raw) > MAX_ID_BYTES:
        raise InvalidId(
            f"{what} {value[:40]!r}... is {len(raw)} bytes long; the limit is {MAX_ID_BYTES} bytes of UTF-8"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidId(f"{what} {value!r} is not valid UTF-8 text") from None
    # NUL separates key parts on disk and control characters make ids impossible to type.
    bad = next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise InvalidId(f"{what} {value!r} contains the control character {bad!r}; use printable text")
    return raw
