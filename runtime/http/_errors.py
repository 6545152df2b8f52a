"""The API's one error form: `{"error": {"type", "message"}}` with a 4xx status, or 503 while
the store's server cannot be reached."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSON

from journal import ForkError
from journal.errors import (
    CorruptEntry,
    InvalidId,
    InvocationBusy,
    InvocationConflict,
    InvocationNotFound,
    KeyBusy,
    MessageNotFound,
    MessageRefused,
    MessageValueRefused,
    PromiseConflict,
    PromiseNotFound,
    PromiseValueRefused,
    StoreUnavailable,
    ValueNotPublished,
)

from ..errors import NotResumable, PromiseNotSettable, RollbackImpossible
from .models import Error, ErrorDetail

_encoder = msgspec.json.Encoder(enc_hook=repr)


class JSONResponse(_StarletteJSON):
    """JSON as msgspec writes it: journal values may hold bytes (base64) and datetimes (ISO
    8601), which the standard library's encoder refuses; and it is several times faster."""

    def render(self, content: Any) -> bytes:
        return _encoder.encode(content)


class ApiError(Exception):
    """An answer other than success: its status, a type a script can test, and a message."""

    def __init__(self, status: int, type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message


def error_response(status: int, type: str, message: str) -> JSONResponse:
    return JSONResponse(Error(ErrorDetail(type, message)), status_code=status)


async def api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.type, exc.message)


# Library errors a request can cause, and the status each one answers with.
_STATUS: dict[type[Exception], int] = {
    MessageValueRefused: 422,  # before PromiseValueRefused, its base: its own name is the type
    InvocationNotFound: 404, PromiseNotFound: 404, InvocationConflict: 409, PromiseConflict: 409,
    PromiseNotSettable: 409, RollbackImpossible: 409, InvalidId: 400, PromiseValueRefused: 422,
    InvocationBusy: 409, KeyBusy: 409, NotResumable: 409, ForkError: 422,
    MessageRefused: 409, MessageNotFound: 404, ValueNotPublished: 404,
    # A damaged record: the request is fine, the invocation it names cannot be read.
    CorruptEntry: 409,
    StoreUnavailable: 503,
}
RETRY_AFTER = "1"  # seconds: a store reconnects within about that of its server's return


def unavailable(exc: StoreUnavailable) -> JSONResponse:
    response = error_response(503, "StoreUnavailable", str(exc))
    response.headers["Retry-After"] = RETRY_AFTER
    return response


async def journal_error(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, StoreUnavailable):
        return unavailable(exc)
    for cls, status in _STATUS.items():
        if isinstance(exc, cls):
            return error_response(status, cls.__name__, str(exc))
    raise exc
