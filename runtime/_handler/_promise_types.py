"""Typed promises: what `ctx.promise(name, type=T)` records with its wait, and how it decodes.

A wait records `T` as the code spells it and as a JSON Schema (`journal.PromiseType`), so
that the store refuses a value that does not fit when it is resolved, from any process and
without the handler's code (`journal/_schema.py`), and the promise stays pending. Types
msgspec knows (Structs, dataclasses, TypedDicts, unions, `bool`, ...) give their schema
through `msgspec.json.schema`; a Pydantic model (or a type only Pydantic reads) through
Pydantic, imported only for such a type.
"""

from __future__ import annotations

from typing import Any

import msgspec

from journal import PromiseType, decode_value

from ._handlers import type_text

_cache: dict[Any, tuple[str, str] | None] = {}


def _pydantic_adapter(tp: Any) -> Any:
    """A Pydantic `TypeAdapter` for `tp`, if Pydantic is installed and reads it; else None."""
    try:
        from pydantic import TypeAdapter  # only a type msgspec cannot read gets here
    except ImportError:
        return None
    try:
        return TypeAdapter(tp)
    except Exception:  # noqa: BLE001 - not a type Pydantic reads either
        return None


def _is_pydantic(tp: Any) -> bool:
    return hasattr(tp, "model_json_schema") and hasattr(tp, "model_validate")


def _describe(tp: Any) -> tuple[str, str] | None:
    """`(type text, schema JSON)` for `tp`, or None when neither msgspec nor Pydantic can say."""
    schema: Any = None
    if not _is_pydantic(tp):
        try:
            schema = msgspec.json.schema(tp)
        except (TypeError, ValueError):
            schema = None
    if schema is None:
        adapter = _pydantic_adapter(tp)
        if adapter is None:
            return None
        try:
            schema = adapter.json_schema()
        except Exception:  # noqa: BLE001 - a type Pydantic reads but cannot describe
            return None
    try:
        return type_text(tp), msgspec.json.encode(schema).decode()
    except (TypeError, msgspec.EncodeError):
        return None


def promise_type(name: str, tp: Any) -> PromiseType | None:
    """What the wait on promise `name` with `type=tp` records (None: nothing checkable)."""
    if tp is None or tp is Any:
        return None
    try:
        described = _cache[tp]
    except KeyError:
        described = _cache[tp] = _describe(tp)
    except TypeError:  # an unhashable type expression
        described = _describe(tp)
    return None if described is None else PromiseType(name, *described)


def decode_promise_value(raw: msgspec.Raw, tp: Any) -> Any:
    """The promise's value as `tp`: msgspec's decoding, or Pydantic's for its models.

    Raises msgspec.ValidationError (Pydantic's own error for its models) if it does not fit."""
    if tp is None or tp is Any or not _is_pydantic(tp):
        return decode_value(raw, tp if tp is not None else Any)
    return tp.model_validate(decode_value(raw))


def is_validation_error(exc: BaseException) -> bool:
    """Whether `exc` says a value did not fit its type (msgspec's, or Pydantic's)."""
    if isinstance(exc, (msgspec.ValidationError, msgspec.DecodeError)):
        return True
    return type(exc).__name__ == "ValidationError" and type(exc).__module__.startswith("pydantic")
