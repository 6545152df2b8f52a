"""Reading a request: path parameters, numbers in the query string, JSON bodies into types."""

from __future__ import annotations

import math
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request

from ._errors import ApiError

T = TypeVar("T")


def param(request: Request, name: str) -> str:
    """A path parameter; an id may hold `/`, which `SlashesInIds` routed as NUL."""
    value: str = request.path_params[name]
    return value.replace("\x00", "/")


def number(text: str | None, name: str, low: float, high: float, *, default: float, integer: bool = False) -> float:
    """A query parameter that must be a number from `low` to `high` (422 otherwise)."""
    if text is None or text == "":
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:
        bound = f"from {low:g} to {high:g}" if high != math.inf else f"at least {low:g}"
        raise ApiError(422, "InvalidParameter", f"{name}={text!r} must be {'an integer' if integer else 'a number'} "
                       f"{bound}")
    return value


def convert(data: Any, cls: type[T]) -> T:
    """A JSON body as `cls` (a msgspec Struct), or 422 saying what does not fit."""
    if not isinstance(data, dict):
        raise ApiError(422, "InvalidBody", f"the request body must be a JSON object for {cls.__name__}, "
                       f"got {type(data).__name__ if data is not None else 'nothing'}")
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise ApiError(422, "InvalidBody", f"the request body does not fit: {exc}") from None
