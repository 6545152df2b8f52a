"""Checking a value against the JSON Schema a typed promise recorded with its wait.

A promise awaited with `type=T` records `T`'s JSON Schema (what `msgspec.json.schema` or
Pydantic emits) beside the wait, so that whoever resolves it, in any process and without
the handler's code, can refuse a value that `T` would not accept before it is delivered.
This checks the part of JSON Schema those two emit: `type`, `enum`, `const`,
`properties`/`required`/`additionalProperties`, `items`/`prefixItems`, `anyOf`/`oneOf`/
`allOf`, `$ref` into `$defs`, `nullable`, and the bounds of numbers, strings, arrays and
objects. Keywords it does not know are ignored, so it refuses only what `T` refuses; what
the schema cannot say (msgspec describes a datetime as a plain string) is left to the
handler's own decoding.
"""

from __future__ import annotations

import datetime
import operator
import re
from typing import Any

import msgspec

from ._records import InvocationRecord, PromiseType
from .errors import MessageValueRefused, PromiseValueRefused

_MAX_DEPTH = 64  # schemas are the handler's; a cycle of $refs with no data under it stops here


def check(schema: dict[str, Any], value: Any) -> str | None:
    """Why `value` (decoded from JSON or msgpack) does not fit `schema`, or None if it does."""
    return _check(schema, _plain(value), schema, "value", 0)


def promise_type(record: InvocationRecord, name: str) -> PromiseType | None:
    """The type the invocation's current wait accepts for promise `name`, if it was given one."""
    return next((t for t in record.promise_types if t.name == name), None)


def refusal(record: InvocationRecord, name: str, raw: bytes) -> PromiseValueRefused | None:
    """Why the value `raw` (msgpack) cannot resolve promise `name` of `record`'s invocation,
    which waits on it with a type, or None if it fits (or the wait has no type)."""
    wanted = promise_type(record, name)
    if wanted is None:
        return None
    try:
        schema = msgspec.json.decode(wanted.schema)
        reason = check(schema, msgspec.msgpack.decode(raw)) if isinstance(schema, dict) else None
    except (msgspec.DecodeError, RecursionError):
        return None  # nothing to check against: the handler's decoding decides
    if reason is None:
        return None
    fits = msgspec.json.encode(example(schema)).decode()
    return PromiseValueRefused(
        f"promise {name!r} of invocation {record.id!r} expects {wanted.type}, and this value does not fit it "
        f"({reason}); nothing was delivered and the promise stays pending: resolve it with a value of type {wanted.type}, "
        f"for example {fits if len(fits) <= 200 else fits[:197] + '...'}"
    )


def message_refusal(invocation_id: str, topic: str, wanted: PromiseType, raw: bytes) -> MessageValueRefused | None:
    """Why the value `raw` (msgpack) cannot be sent on `topic`, which the invocation's handler
    receives with the type `wanted`, or None if it fits."""
    try:
        schema = msgspec.json.decode(wanted.schema)
        reason = check(schema, msgspec.msgpack.decode(raw)) if isinstance(schema, dict) else None
    except (msgspec.DecodeError, RecursionError):
        return None
    if reason is None:
        return None
    fits = msgspec.json.encode(example(schema)).decode()
    return MessageValueRefused(
        f"invocation {invocation_id!r} receives topic {topic!r} as {wanted.type}, and this value does not fit it "
        f"({reason}); nothing was sent and the invocation goes on: send a {wanted.type}, "
        f"for example {fits if len(fits) <= 200 else fits[:197] + '...'}"
    )


def example(schema: dict[str, Any]) -> Any:
    """A value that fits `schema`: its default, its first choice, or an empty one of its type
    with every required property filled in (for a form to start from)."""
    return _example(schema, schema, 0)


def _plain(value: Any) -> Any:
    """As JSON would carry it: datetimes as ISO strings, bytes as base64, structs as objects."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return msgspec.to_builtins(value)


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return node
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
    return target if isinstance(target, dict) else {}


_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, (list, tuple)),
    "object": lambda v: isinstance(v, dict),
}


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](value):
            return name
    return type(value).__name__


def _got(value: Any) -> str:
    kind = _json_type(value)
    return kind if value is None else f"{kind} {_show(value)}"


def _show(value: Any) -> str:
    text = msgspec.json.encode(value).decode() if _json_type(value) in _TYPES else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check(node: Any, value: Any, root: dict[str, Any], where: str, depth: int) -> str | None:
    if depth > _MAX_DEPTH:
        return None
    if node is True or not isinstance(node, dict):
        return None if node is not False else f"{where}: no value is allowed here"
    node = _resolve(node, root)
    if node.get("nullable") and value is None:
        return None
    for key in ("anyOf", "oneOf"):
        choices = node.get(key)
        if isinstance(choices, list) and choices:
            reasons = [_check(c, value, root, where, depth + 1) for c in choices]
            if all(r is not None for r in reasons):
                # Of `Decision | bool`, an object can only have meant the Decision: say which
                # of its fields is at fault, rather than that it is neither choice.
                meant = [r for c, r in zip(choices, reasons, strict=True) if _same_kind(c, value, root)]
                if len(choices) == 1 or len(meant) == 1:
                    return (meant or reasons)[0]
                wanted = " or ".join(_describe(c, root) for c in choices)
                return f"{where}: expected {wanted}, got {_got(value)}"
    for part in node.get("allOf") or ():
        reason = _check(part, value, root, where, depth + 1)
        if reason is not None:
            return reason
    if "const" in node and value != node["const"] or _bool_mismatch(node.get("const", value), value):
        return f"{where}: expected {_show(node['const'])}, got {_show(value)}"
    if "enum" in node and not any(value == c and not _bool_mismatch(c, value) for c in node["enum"]):
        return f"{where}: expected one of {', '.join(_show(c) for c in node['enum'])}, got {_show(value)}"
    kind = node.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if node.get("nullable"):
            kinds = [*kinds, "null"]
        if not any(k in _TYPES and _TYPES[k](value) for k in kinds):
            return f"{where}: expected {' or '.join(kinds)}, got {_got(value)}"
    return _bounds(node, value, root, where, depth)


_NUMBER_BOUNDS = (("minimum", operator.ge), ("maximum", operator.le),
                  ("exclusiveMinimum", operator.gt), ("exclusiveMaximum", operator.lt))


def _bool_mismatch(expected: Any, value: Any) -> bool:
    """`true == 1` in Python, never in JSON."""
    return isinstance(expected, bool) != isinstance(value, bool)


def _bounds(node: dict[str, Any], value: Any, root: dict[str, Any], where: str, depth: int) -> str | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, ok in _NUMBER_BOUNDS:
            bound = node.get(key)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool) and not ok(value, bound):
                return f"{where}: {value} breaks {key} {bound}"
        step = node.get("multipleOf")
        # Integers only: a float's remainder is not exact, and the check must never refuse what T accepts.
        if isinstance(step, int) and isinstance(value, int) and step > 0 and value % step:
            return f"{where}: {value} is not a multiple of {step}"
    elif isinstance(value, str):
        if isinstance(node.get("minLength"), int) and len(value) < node["minLength"]:
            return f"{where}: shorter than {node['minLength']} characters"
        if isinstance(node.get("maxLength"), int) and len(value) > node["maxLength"]:
            return f"{where}: longer than {node['maxLength']} characters"
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            try:
                if re.search(pattern, value) is None:
                    return f"{where}: does not match the pattern {pattern!r}"
            except re.error:
                pass  # a pattern Python does not read: the handler's decoding decides
        if node.get("format") == "date-time" and not _is_datetime(value):
            return f"{where}: {_show(value)} is not an ISO 8601 date-time"
    elif isinstance(value, (list, tuple)):
        return _check_array(node, list(value), root, where, depth)
    elif isinstance(value, dict):
        return _check_object(node, value, root, where, depth)
    return None


def _is_datetime(text: str) -> bool:
    try:
        datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        return False
    return True


def _check_array(node: dict[str, Any], value: list[Any], root: dict[str, Any], where: str, depth: int) -> str | None:
    if isinstance(node.get("minItems"), int) and len(value) < node["minItems"]:
        return f"{where}: fewer than {node['minItems']} items"
    if isinstance(node.get("maxItems"), int) and len(value) > node["maxItems"]:
        return f"{where}: more than {node['maxItems']} items"
    prefix = node.get("prefixItems")
    prefix = prefix if isinstance(prefix, list) else []
    for i, item in enumerate(value):
        schema = prefix[i] if i < len(prefix) else node.get("items", True)
        reason = _check(schema, item, root, f"{where}[{i}]", depth + 1)
        if reason is not None:
            return reason
    return None


def _check_object(node: dict[str, Any], value: dict[str, Any], root: dict[str, Any], where: str,
                  depth: int) -> str | None:
    found = node.get("properties")
    properties: dict[str, Any] = found if isinstance(found, dict) else {}
    for name in node.get("required") or ():
        if name not in value:
            return f"{where}: the field {name!r} is missing"
    extra = node.get("additionalProperties", True)
    for name, item in value.items():
        here = f"{where}.{name}" if isinstance(name, str) and name.isidentifier() else f"{where}[{_show(name)}]"
        schema = properties.get(name, extra) if isinstance(name, str) else extra
        if schema is False:
            return f"{where}: the field {_show(name)} is not one it has"
        reason = _check(schema, item, root, here, depth + 1)
        if reason is not None:
            return reason
    for key, ok in (("minProperties", operator.ge), ("maxProperties", operator.le)):
        if isinstance(node.get(key), int) and not ok(len(value), node[key]):
            return f"{where}: breaks {key} {node[key]}"
    return None


def _same_kind(node: Any, value: Any, root: dict[str, Any]) -> bool:
    """Whether the choice `node` declares the JSON type `value` has (an object for an object)."""
    node = _resolve(node, root) if isinstance(node, dict) else node
    kind = node.get("type") if isinstance(node, dict) else None
    kinds = kind if isinstance(kind, list) else [kind]
    return any(k in _TYPES and _TYPES[k](value) for k in kinds)


def _describe(node: Any, root: dict[str, Any]) -> str:
    if not isinstance(node, dict):
        return "anything"
    node = _resolve(node, root)
    if "title" in node and isinstance(node["title"], str):
        return node["title"]
    if "const" in node:
        return _show(node["const"])
    if "enum" in node:
        return "one of " + ", ".join(_show(c) for c in node["enum"])
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(map(str, kind))
    return str(kind) if kind is not None else "a value"


_EMPTY: dict[str, Any] = {"null": None, "boolean": False, "integer": 0, "number": 0, "string": "", "array": [], "object": {}}


def _example(node: Any, root: dict[str, Any], depth: int) -> Any:
    if not isinstance(node, dict) or depth > _MAX_DEPTH:
        return None
    node = _resolve(node, root)
    if "default" in node:
        return node["default"]
    if "const" in node:
        return node["const"]
    if isinstance(node.get("enum"), list) and node["enum"]:
        return node["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        choices = node.get(key)
        if isinstance(choices, list) and choices:
            # A nullable choice is the handler's "nothing yet": prefer the first real one.
            real = [c for c in choices if not (isinstance(c, dict) and c.get("type") == "null")]
            return _example((real or choices)[0], root, depth + 1)
    kind = node.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object":
        properties = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        required = set(node.get("required") or ())
        return {name: _example(schema, root, depth + 1) for name, schema in properties.items()
                if name in required or (isinstance(schema, dict) and "default" in schema)}
    if kind == "array" and isinstance(node.get("prefixItems"), list):
        return [_example(item, root, depth + 1) for item in node["prefixItems"]]
    if kind == "string" and node.get("format") == "date-time":
        return "1970-01-01T00:00:00Z"
    if kind in ("integer", "number") and isinstance(node.get("minimum"), (int, float)):
        return node["minimum"]
    return _EMPTY.get(kind) if isinstance(kind, str) else None


__all__ = ("check", "example", "promise_type", "refusal")
