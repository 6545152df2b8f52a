"""What stands between the network and the store: the bearer token, the body bound, ids."""

from __future__ import annotations

import hmac
import ipaddress
import re
from typing import Any

import msgspec
from starlette.requests import Request

from journal import validate_id
from journal.errors import InvalidId

from ._errors import ApiError

DEFAULT_MAX_BODY = 1 << 20  # 1 MiB (DESIGN.md, "HTTP API and web UI")
# How deep a request body's JSON may nest. msgspec stops at Python's recursion limit
# (about 1,000) with a RecursionError, and what decodes just under it can still overflow
# the stack later (encoding the input, digesting it); no agent's input needs 100.
MAX_DEPTH = 100


def is_loopback(host: str) -> bool:
    """True when `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def authorized(request: Request, token: bytes) -> bool:
    """`Authorization: Bearer TOKEN`, compared in constant time whatever its length.

    `token` is the token's UTF-8 bytes; the header is compared as the bytes the client sent
    (ASGI hands headers over as latin-1 text, which maps each byte to one character and
    back), so a token that is not ASCII matches when the client sends it as UTF-8.
    """
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        given = ""
    # compare_digest's time depends only on the length of its second argument.
    return hmac.compare_digest(given.strip(" \t").encode("latin-1"), token) and bool(token)


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON, refused with 413 past `limit` bytes (whatever Content-Length says)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    if not body:
        return None
    data = bytes(body)
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ApiError(400, "MalformedJSON", f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        value = None
    if value is None or data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        _check_depth(data)
    return value


_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_OPENS = bytes.maketrans(b"[{]}", b"\x01\x01\x02\x02")


def _check_depth(data: bytes) -> None:
    """400 if the JSON in `data` nests deeper than MAX_DEPTH (brackets inside strings aside)."""
    depth = 0
    for byte in _STRINGS.sub(b"", data).translate(_OPENS):
        if byte == 1:
            depth += 1
            if depth > MAX_DEPTH:
                raise ApiError(400, "MalformedJSON", f"the request body nests deeper than {MAX_DEPTH} levels; "
                               "send a flatter document")
        elif byte == 2:
            depth -= 1


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "BodyTooLarge", f"the request body is over the limit of {limit} bytes; send a smaller input")


def checked_id(value: str, what: str = "invocation id") -> str:
    """An id from a path or body, validated exactly as the CLI validates it."""
    try:
        validate_id(value, what)
    except InvalidId as exc:
        raise ApiError(400, "InvalidId", str(exc)) from None
    return value
