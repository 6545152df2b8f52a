"""What stands between the network and the store: the bearer token, the body bound, ids."""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

import msgspec
from starlette.requests import Request

from journal import validate_id
from journal.errors import InvalidId

from ._errors import ApiError

DEFAULT_MAX_BODY = 1 << 20  # 1 MiB (DESIGN.md, "HTTP API and web UI")


def is_loopback(host: str) -> bool:
    """True when `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def authorized(request: Request, token: bytes) -> bool:
    """`Authorization: Bearer TOKEN`, compared in constant time whatever its length."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        given = ""
    # compare_digest's time depends only on the length of its second argument.
    return hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), token) and bool(token)


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
    try:
        return msgspec.json.decode(bytes(body))
    except msgspec.DecodeError as exc:
        raise ApiError(400, "MalformedJSON", f"the request body is not valid JSON: {exc}") from None


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "BodyTooLarge", f"the request body is over the limit of {limit} bytes; send a smaller input")


def checked_id(value: str, what: str = "invocation id") -> str:
    """An id from a path or body, validated exactly as the CLI validates it."""
    try:
        validate_id(value, what)
    except InvalidId as exc:
        raise ApiError(400, "InvalidId", str(exc)) from None
    return value
