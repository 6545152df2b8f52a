"""Long-term memory: namespaced items shared by every invocation and thread of a store, kept
in the store's `lg_memory` table. `ctx.memory` (journaled) and LangGraph's `JournalStore`
both read and write them here.

Key: each namespace label escaped and terminated (see `_escape`), then `\\x00\\x01`, then the
item key escaped. A label never starts with `\\x00\\x01`, so a namespace's items and its
sub-namespaces never mix, and a prefix scan over labels finds exactly a namespace subtree.
Items whose TTL has passed are invisible at once and removed by `sweep()`.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable, Sequence
from types import EllipsisType
from typing import Any

import msgspec

from journal import TableDelete, TablePut, from_us
from journal.errors import JournalError

TABLE = "lg_memory"
_END, _ITEM = b"\x00\x00", b"\x00\x01"


class MemoryItem(msgspec.Struct, frozen=True):
    """An item of long-term memory, as `ctx.memory` returns it."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime.datetime
    updated_at: datetime.datetime


class MemoryArgumentError(JournalError, ValueError):
    """A memory call was given a namespace, key, value or filter it cannot use."""


class _Stored(msgspec.Struct, array_like=True):
    value: msgspec.Raw
    created_at: int
    updated_at: int
    expires_at: int | None = None
    ttl_us: int | None = None


_enc = msgspec.msgpack.Encoder()
_stored_dec = msgspec.msgpack.Decoder(_Stored)
_value_dec = msgspec.msgpack.Decoder(dict[str, Any])


def _now_us() -> int:
    return time.time_ns() // 1000


def _escape(text: str) -> bytes:
    return text.encode("utf-8").replace(b"\x00", b"\x00\xff") + _END


def _unescape_parts(raw: bytes) -> list[str]:
    out, pos = [], 0
    while pos < len(raw):
        end = raw.index(_END, pos)
        out.append(raw[pos:end].replace(b"\x00\xff", b"\x00").decode("utf-8"))
        pos = end + 2
    return out


def check_namespace(namespace: Sequence[str], what: str = "namespace") -> tuple[str, ...]:
    namespace = tuple(namespace)
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise MemoryArgumentError(
                f"{what} {namespace!r} has the label {label!r}: labels are non-empty strings without '.' or NUL"
            )
    return namespace


def item_key(namespace: Sequence[str], key: str) -> bytes:
    if not isinstance(key, str) or not key:
        raise MemoryArgumentError(f"a memory key must be a non-empty string, got {key!r}")
    return b"".join(_escape(label) for label in namespace) + _ITEM + _escape(key)


def split_key(raw: bytes) -> tuple[tuple[str, ...], str]:
    # Labels never begin with \x00\x01, so the first \x00\x01 at a label boundary is the marker.
    pos = 0
    while not raw.startswith(_ITEM, pos):
        pos = raw.index(_END, pos) + 2
    return tuple(_unescape_parts(raw[:pos])), _unescape_parts(raw[pos + 2:])[0]




class MemoryTable:
    """Namespaced items over a store's tables. `default_ttl` and `ttl` are in minutes."""

    def __init__(self, store: Any, *, default_ttl: float | None = None, refresh_on_read: bool = True) -> None:
        self.store = store
        self.default_ttl = default_ttl
        self.refresh_on_read = refresh_on_read

    def get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> MemoryItem | None:
        raw_key = item_key(check_namespace(namespace), key)
        raw = self.store.table_get(TABLE, raw_key)
        found = self._live([(raw_key, raw)] if raw is not None else [], refresh_ttl)
        return found[0] if found else None

    def put(self, namespace: Sequence[str], key: str, value: dict[str, Any] | None, *,
            ttl: float | None | EllipsisType = ...) -> None:
        self.write([(tuple(namespace), key, value, ttl)])

    def write(self, changes: Iterable[tuple[tuple[str, ...], str, dict[str, Any] | None, Any]]) -> None:
        """Puts (and deletes, for a None value) in one atomic batch."""
        now = _now_us()
        ops: list[Any] = []
        for namespace, key, value, ttl in changes:
            raw_key = item_key(check_namespace(namespace), key)
            if value is None:
                ops.append(TableDelete(TABLE, raw_key))
                continue
            if not isinstance(value, dict):
                raise MemoryArgumentError(f"a memory value must be a dict, got {type(value).__name__}")
            try:
                encoded = _enc.encode(value)
            except (TypeError, msgspec.EncodeError) as exc:
                raise MemoryArgumentError(f"the value for {namespace!r}/{key!r} cannot be stored: {exc}") from None
            ttl = self.default_ttl if ttl is ... else ttl
            ttl_us = None if ttl is None else int(ttl * 60e6)
            old = self.store.table_get(TABLE, raw_key)
            created = _stored_dec.decode(old).created_at if old is not None else now
            stored = _Stored(msgspec.Raw(encoded), created, now, None if ttl_us is None else now + ttl_us, ttl_us)
            ops.append(TablePut(TABLE, raw_key, _enc.encode(stored)))
        if ops:
            self.store.table_write(ops)

    def delete(self, namespace: Sequence[str], key: str) -> None:
        self.write([(tuple(namespace), key, None, None)])

    def search(self, namespace_prefix: Sequence[str], *, filter: dict[str, Any] | None = None,
               limit: int = 10, offset: int = 0, refresh_ttl: bool | None = None) -> list[MemoryItem]:
        """Items under `namespace_prefix` (its whole subtree) whose values match `filter`, in
        namespace and key order. Filters compare fields for equality, or with operators
        `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`; nested dicts match nested fields."""
        prefix = b"".join(_escape(label) for label in check_namespace(namespace_prefix, "namespace prefix"))
        matched = []
        for raw_key, raw in self.store.table_scan(TABLE, prefix):
            stored = _stored_dec.decode(raw)
            if stored.expires_at is not None and stored.expires_at <= _now_us():
                continue
            if filter and not matches(_value_dec.decode(stored.value), filter):
                continue
            matched.append((raw_key, raw))
        return self._live(matched[offset:offset + limit] if limit >= 0 else matched[offset:], refresh_ttl)

    def list_namespaces(self, *, prefix: Sequence[str] | None = None, suffix: Sequence[str] | None = None,
                        max_depth: int | None = None, limit: int = 100, offset: int = 0,
                        prefixes: Sequence[Sequence[str]] = (), suffixes: Sequence[Sequence[str]] = ()
                        ) -> list[tuple[str, ...]]:
        """Namespaces holding live items, sorted; `prefix`/`suffix` may use `*` for any label;
        `max_depth` cuts them to their first labels (and merges the duplicates). `prefixes` and
        `suffixes` add more of each, all of which a namespace must match."""
        all_prefixes = [tuple(p) for p in ([prefix] if prefix else []) + list(prefixes) if p]
        all_suffixes = [tuple(s)[::-1] for s in ([suffix] if suffix else []) + list(suffixes) if s]
        prefix = all_prefixes[0] if all_prefixes else None
        scan = b""
        if prefix:
            literal = []
            for label in prefix:
                if label == "*":
                    break
                literal.append(label)
            scan = b"".join(_escape(label) for label in check_namespace(literal, "namespace prefix"))
        found = set()
        now = _now_us()
        for raw_key, raw in self.store.table_scan(TABLE, scan):
            expires = _stored_dec.decode(raw).expires_at
            if expires is not None and expires <= now:
                continue
            namespace, _ = split_key(raw_key)
            if not all(_match(namespace, p) for p in all_prefixes):
                continue
            if all_suffixes and not all(_match(namespace[::-1], s) for s in all_suffixes):
                continue
            found.add(namespace if max_depth is None else namespace[:max_depth])
        return sorted(found)[offset:offset + limit]

    def sweep(self) -> int:
        """Delete every item whose TTL has passed; how many were deleted."""
        now = _now_us()
        dead = [TableDelete(TABLE, k) for k, raw in self.store.table_scan(TABLE)
                if (e := _stored_dec.decode(raw).expires_at) is not None and e <= now]
        if dead:
            self.store.table_write(dead)
        return len(dead)

    def _live(self, rows: list[tuple[bytes, bytes]], refresh_ttl: bool | None) -> list[MemoryItem]:
        """The items of `rows` that have not expired; reading them restarts their TTL if asked."""
        now = _now_us()
        refresh = self.refresh_on_read if refresh_ttl is None else refresh_ttl
        out, renew = [], []
        for raw_key, raw in rows:
            stored = _stored_dec.decode(raw)
            if stored.expires_at is not None and stored.expires_at <= now:
                continue
            if refresh and stored.ttl_us is not None:
                stored.expires_at = now + stored.ttl_us
                renew.append(TablePut(TABLE, raw_key, _enc.encode(stored)))
            namespace, key = split_key(raw_key)
            out.append(MemoryItem(namespace, key, _value_dec.decode(stored.value),
                                  from_us(stored.created_at), from_us(stored.updated_at)))
        if renew:
            # A refreshed deadline need not survive an OS crash: losing it only ages the item.
            self.store.table_write(renew, durable=False)
        return out


def _match(namespace: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    return len(namespace) >= len(pattern) and all(p == "*" or n == p for n, p in zip(namespace, pattern, strict=False))


def matches(value: object, condition: object) -> bool:
    """Whether a stored value matches a filter (the comparison rules of LangGraph's stores)."""
    if isinstance(condition, dict):
        if any(k.startswith("$") for k in condition):
            return all(_operator(value, op, operand) for op, operand in condition.items())
        return isinstance(value, dict) and all(matches(value.get(k), v) for k, v in condition.items())
    if isinstance(condition, (list, tuple)):
        return (isinstance(value, (list, tuple)) and len(value) == len(condition)
                and all(matches(v, c) for v, c in zip(value, condition, strict=False)))
    return value == condition


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(value), float(operand)
        except (TypeError, ValueError):
            return False
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise MemoryArgumentError(f"unknown filter operator {op!r}: use $eq, $ne, $gt, $gte, $lt or $lte")
