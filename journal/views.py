"""What an invocation looks like as plain data: the `--json` shapes of the command line and
the documents of the HTTP API, written once for both (their fields in docs/cli.md and
docs/http.md are a stable interface). Values are decoded from their journaled bytes; times
are ISO 8601 UTC strings. Nothing here formats for a terminal or speaks HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec

from ._codec import decode_entry, decode_value
from ._entries import Called, Entry, ErrorInfo, Started, kind_of, name_of
from ._records import InvocationRecord, Status
from ._store import Store
from ._time import iso_from_us
from .errors import CorruptEntry

iso = iso_from_us
_FORK = re.compile(r"`(journal fork \S+ --at \d+)`")


def record_json(record: InvocationRecord, entries: int) -> dict[str, Any]:
    """One invocation as `journal ls --json` and `GET /invocations` list it."""
    return {
        "id": record.id,
        "handler": record.handler,
        "status": record.status.value,
        "key": record.key,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
        "entries": entries,
    }


def error_json(error: ErrorInfo | None) -> dict[str, Any] | None:
    return None if error is None else msgspec.structs.asdict(error)


def invocation_json(store: Store, record: InvocationRecord) -> dict[str, Any]:
    """`journal show --json` and `journal export --format json`: the invocation and every entry."""
    entries = list(export(store, record.id))
    started = entries[0] if entries and entries[0]["kind"] == "started" else None
    children = [e["child"] for e in entries if e["kind"] == "called"]
    return _invocation(store, record, started["input"] if started else None, children, entries)


def detail(store: Store, record: InvocationRecord) -> dict[str, Any]:
    """`GET /invocations/{id}`: `journal show --json` without its entries, plus `waiting_on`,
    the divergence and, once diverged, the command that forks it.

    Decodes only the input and the entries' kinds, not every value as `invocation_json` does
    (158 µs for a three-entry journal, growing with it: a `GET` under load, bench/http_load.py).
    """
    input_value, children = None, []
    for seq, data in store.entries(record.id):
        entry = decode_entry(data, invocation_id=record.id, seq=seq)
        if isinstance(entry, Started):
            input_value = decode_value(entry.input)
        elif isinstance(entry, Called):
            children.append(entry.child)
    doc = _invocation(store, record, input_value, children, None)
    doc["waiting_on"] = waiting_on(record)
    doc["divergence"] = record.divergence
    found = _FORK.search(record.divergence or "")
    doc["fork_command"] = found.group(1) if found else None
    return doc


def _invocation(store: Store, record: InvocationRecord, input_value: Any, children: list[str],
                entries: list[dict[str, Any]] | None) -> dict[str, Any]:
    error = error_json(record.error)
    if record.status == Status.DIVERGED and record.divergence and error is None:
        error = {"type": "NondeterminismError", "message": record.divergence, "terminal": False}
    doc: dict[str, Any] = {
        "id": record.id, "handler": record.handler, "status": record.status.value, "key": record.key,
        "parent": record.parent, "created_at": iso(record.created_at), "updated_at": iso(record.updated_at),
        "input": input_value,
        "result": decode_value(record.result) if record.status == Status.COMPLETED else None,
        "error": error, "waiting": record.waiting, "wake_at": iso(record.wake_at),
    }
    if entries is not None:
        doc["entries"] = entries
    doc["children"] = list(dict.fromkeys(children))
    doc["continued_from"] = record.continued_from
    doc["continued_as"] = record.continued_as
    doc["forked_from"] = forked_from(store, record)
    return doc


def result_json(record: InvocationRecord) -> dict[str, Any]:
    """`GET /invocations/{id}/result`, and how `journal run --json` reports an ending."""
    return {
        "id": record.id,
        "status": record.status.value,
        "result": decode_value(record.result) if record.status == Status.COMPLETED else None,
        "error": error_json(record.error),
    }


def waiting_on(record: InvocationRecord) -> list[dict[str, Any]]:
    """What a suspended (or queued) invocation waits for: promises, a timer, a child, its turn."""
    if record.status not in (Status.SUSPENDED, Status.PENDING):
        return []
    out: list[dict[str, Any]] = []
    for name in ([record.waiting] if record.waiting else []) + list(record.waiting_any):
        kind, sep, rest = name.partition(":")
        if sep and kind in ("child", "turn"):
            out.append({"kind": kind, "id": rest})
        elif record.status == Status.SUSPENDED:
            out.append({"kind": "promise", "name": name})
    if record.wake_at is not None and record.status == Status.SUSPENDED:
        out.append({"kind": "timer", "until": iso(record.wake_at)})
    return out


def entry_view(entry: Entry, seq: int) -> dict[str, Any]:
    """An entry as plain data for `show --json` and `export`: seq, kind, name, at, and its fields."""
    out: dict[str, Any] = {"seq": seq, "kind": kind_of(entry), "name": name_of(entry), "at": iso(entry.at)}
    for field in entry.__struct_fields__:
        if field in ("name", "at"):
            continue
        value = getattr(entry, field)
        if isinstance(value, msgspec.Raw):
            if field == "value" and getattr(entry, "error", None) is not None:
                continue
            value = decode_value(value)
        elif isinstance(value, msgspec.Struct):
            value = msgspec.to_builtins(value)
            if field == "error":
                value = dict(zip(("type", "message", "terminal"), value, strict=False)) if isinstance(value, list) else value
        elif field in ("until",):
            value = iso(value)
        elif field == "digest":
            value = f"{value:016x}"
        out[field] = value
    return out


def corrupt_view(seq: int, exc: CorruptEntry) -> dict[str, Any]:
    """An entry that does not decode, where a listing shows it instead of stopping."""
    return {"seq": seq, "kind": "corrupt", "name": None, "at": None, "error": str(exc)}


def export(store: Store, invocation_id: str, after: int = -1) -> Iterator[dict[str, Any]]:
    """Every entry of an invocation after seq `after`, decoded, in seq order. Undecodable entries say so."""
    for seq, data in store.entries(invocation_id, after + 1):
        try:
            yield entry_view(decode_entry(data, invocation_id=invocation_id, seq=seq), seq)
        except CorruptEntry as exc:
            yield corrupt_view(seq, exc)


def state_json(key: str, state: dict[str, bytes], queue: list[str]) -> dict[str, Any]:
    """`journal state --json` and `GET /keys/{key}/state`: a key's durable state and its queue."""
    values = {}
    for name, raw in state.items():
        try:
            values[name] = decode_value(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise CorruptEntry(f"the value of {name!r} in the state of key {key!r} does not decode ({exc})") from None
    return {"key": key, "state": values, "queue": queue}


def decoded(store: Store, invocation_id: str, start: int = 0) -> list[tuple[int, Entry | CorruptEntry]]:
    """The invocation's entries from `start`; an entry that does not decode stands as its error."""
    out: list[tuple[int, Entry | CorruptEntry]] = []
    for seq, data in store.entries(invocation_id, start):
        try:
            out.append((seq, decode_entry(data, invocation_id=invocation_id, seq=seq)))
        except CorruptEntry as exc:
            out.append((seq, exc))
    return out


def children_of(entries: list[tuple[int, Entry | CorruptEntry]]) -> list[str]:
    """The ids of the child invocations an invocation started (`called` entries), in seq order."""
    return list(dict.fromkeys(e.child for _, e in entries if isinstance(e, Called)))


def forked_from(store: Store, record: InvocationRecord) -> str | None:
    """The invocation `record` was forked from, if its `parent` is that rather than a caller.

    `parent` names either the invocation that started this one with ctx.call/ctx.send
    (whose journal then holds a `called` entry naming it, or naming the first invocation
    of its continue-as-new chain) or the one `journal fork` copied it from. When the
    parent's journal is gone (trimmed) nothing says which: it counts as the caller.
    """
    if record.parent is None:
        return None
    first = record
    while first.continued_from is not None:  # a caller awaits the first invocation of a chain
        earlier = store.get(first.continued_from)
        if earlier is None:
            break
        first = earlier
    entries = decoded(store, record.parent)
    if not entries:
        return None
    return None if set(children_of(entries)) & {record.id, first.id} else record.parent


__all__ = ("children_of", "corrupt_view", "decoded", "detail", "entry_view", "error_json", "export", "forked_from",
           "invocation_json", "iso", "record_json", "result_json", "state_json", "waiting_on")
