"""What an invocation looks like as plain data: the `--json` shapes of the command line and
the documents of the HTTP API, written once for both (their fields in docs/cli.md and
docs/http.md are a stable interface). Values are decoded from their journaled bytes; times
are ISO 8601 UTC strings. Nothing here formats for a terminal or speaks HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from ._codec import decode_entry, decode_value
from ._entries import Called, Entry, ErrorInfo, Failed, Frame, Started, kind_of, name_of
from ._fork import retries
from ._listing import Damaged
from ._records import InvocationRecord, Status
from ._schedules import ScheduleRecord
from ._schema import example
from ._store import Store
from ._time import iso_from_us, now_us
from .errors import CorruptEntry, StoreError

iso = iso_from_us
_FORK = re.compile(r"`(journal fork \S+ --at \d+)`")


def record_json(record: InvocationRecord, entries: int, owner: dict[str, Any] | None = None,
                updated_at: int | None = None) -> dict[str, Any]:
    """One invocation as `journal ls --json` and `GET /invocations` list it (`owner`: while
    it is running, `owner_json`'s; `updated_at`: `updated_us`', else the record's)."""
    doc: dict[str, Any] = {
        "id": record.id,
        "handler": record.handler,
        "status": record.status.value,
        "key": record.key,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at if updated_at is None else updated_at),
        "entries": entries,
        "priority": record.priority,
        "start_at": iso(record.start_at),
        "tags": dict(record.tags),
    }
    if owner is not None:
        doc["owner"] = owner
    return doc


def owner_json(store: Store, record: InvocationRecord, now: int | None = None) -> dict[str, Any] | None:
    """Who runs a `running` invocation: `{"host", "pid", "alive"}`, where `alive` is false once
    the owner is known dead (its pid gone on this host, its database session ended on
    PostgreSQL, or its lease expired); None for any other status."""
    if record.status != Status.RUNNING:
        return None
    lease = store.lease(record.id)
    alive = lease is not None and store.live_lease(record.id, now_us() if now is None else now) is not None
    return {"host": lease.host or None if lease else None, "pid": lease.pid or None if lease else None,
            "alive": alive}


def damaged_json(item: Damaged, entries: int) -> dict[str, Any]:
    """A record that does not decode, where `journal ls --json` and `GET /invocations` list
    it: its id, the status `damaged`, and what is wrong (`journal check` says more)."""
    return {
        "id": item.id, "handler": None, "status": "damaged", "key": None,
        "created_at": iso(item.created_at) if item.created_at else None, "updated_at": None,
        "entries": entries, "damaged": item.error,
    }


def listed_json(store: Store, item: InvocationRecord | Damaged) -> dict[str, Any]:
    """An item of `Store.page` as `journal ls --json` and `GET /invocations` list it."""
    entries = store.entry_count(item.id)
    if not isinstance(item, InvocationRecord):
        return damaged_json(item, entries)
    doc = record_json(item, entries, owner_json(store, item), updated_us(store, item, entries))
    if item.status == Status.FAILED:
        doc["retries"] = retries_json(store, item)
    return doc


def retries_json(store: Store, record: InvocationRecord) -> list[dict[str, Any]]:
    """A failed invocation's retries (`journal retry`, `POST /retry`): `[{"id", "status"}]`,
    oldest first; one that has not failed means it was retried (and is not retried again
    without --force)."""
    return [{"id": r.id, "status": r.status.value} for r in retries(store, record.id)]


def updated_us(store: Store, record: InvocationRecord, entries: int | None = None) -> int:
    """When the invocation last changed (µs): its record's time, or for a running one the
    commit time of its latest entry if later. A plain step's append writes its entry and not
    the record (one write less on the step path), so the record's time of a running
    invocation is when it was taken; the entry's `at` says when it last moved. `entries`:
    the entry count, when the caller has it."""
    if record.status != Status.RUNNING:
        return record.updated_at  # every other status is set by a write of the record itself
    count = store.entry_count(record.id) if entries is None else entries
    if count <= 0:
        return record.updated_at
    latest = store.entries(record.id, count - 1)
    if not latest:
        return record.updated_at
    seq, data = latest[-1]
    try:
        at = decode_entry(data, invocation_id=record.id, seq=seq).at
    except CorruptEntry:
        return record.updated_at
    return max(record.updated_at, at)


def error_json(error: ErrorInfo | None, traceback: list[Frame] | None = None) -> dict[str, Any] | None:
    """An error as plain data; with the frames its failure was journaled with, `traceback`."""
    if error is None:
        return None
    doc = msgspec.structs.asdict(error)
    if traceback:
        doc["traceback"] = frames_json(traceback)
    return doc


def frames_json(frames: list[Frame]) -> list[dict[str, Any]]:
    """A failure's traceback: `[{"file", "line", "function"}]`, outermost first."""
    return [{"file": f.file, "line": f.line, "function": f.function} for f in frames]


def invocation_json(store: Store, record: InvocationRecord) -> dict[str, Any]:
    """`journal show --json` and `journal export --format json`: the invocation and every entry."""
    entries = list(export(store, record.id))
    started = entries[0] if entries and entries[0]["kind"] == "started" else None
    children = [e["child"] for e in entries if e["kind"] == "called"]
    failed = next((e for e in reversed(entries) if e["kind"] == "failed"), None)
    frames = [Frame(f["file"], f["line"], f["function"]) for f in failed.get("traceback", ())] if failed else None
    return _invocation(store, record, started["input"] if started else None, children, entries, frames,
                       updated_us(store, record, len(entries)))


def detail(store: Store, record: InvocationRecord, runs: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """`GET /invocations/{id}`: `journal show --json` without its entries, plus `waiting_on`,
    the divergence and, once diverged, the command that forks it. `runs` says whether a
    handler name is one that the caller (a server's workers) can run: a pending invocation
    whose handler it cannot run then waits on `{"kind": "handler", "name"}` as well.

    Decodes only the input and the entries' kinds, not every value as `invocation_json` does
    (158 µs for a three-entry journal, growing with it: a `GET` under load, bench/http_load.py).
    """
    input_value, children, frames = None, [], None
    latest = record.updated_at
    for seq, data in store.entries(record.id):
        entry = decode_entry(data, invocation_id=record.id, seq=seq)
        latest = max(latest, entry.at)
        if isinstance(entry, Started):
            input_value = decode_value(entry.input)
        elif isinstance(entry, Called):
            children.append(entry.child)
        elif isinstance(entry, Failed):
            frames = entry.traceback
    doc = _invocation(store, record, input_value, children, None, frames,
                      latest if record.status == Status.RUNNING else record.updated_at)
    doc["waiting_on"] = waiting_on(record) + limit_waits(store, record)
    if runs is not None and record.status == Status.PENDING and not runs(record.handler):
        doc["waiting_on"].append({"kind": "handler", "name": record.handler})
    doc["divergence"] = record.divergence
    found = _FORK.search(record.divergence or "")
    doc["fork_command"] = found.group(1) if found else None
    return doc


def _invocation(store: Store, record: InvocationRecord, input_value: Any, children: list[str],
                entries: list[dict[str, Any]] | None, frames: list[Frame] | None, updated_at: int) -> dict[str, Any]:
    error = error_json(record.error, frames if record.status == Status.FAILED else None)
    if record.status == Status.DIVERGED and record.divergence and error is None:
        error = {"type": "NondeterminismError", "message": record.divergence, "terminal": False}
    doc: dict[str, Any] = {
        "id": record.id, "handler": record.handler, "status": record.status.value, "key": record.key,
        "parent": record.parent, "created_at": iso(record.created_at), "updated_at": iso(updated_at),
        "input": input_value,
        "result": decode_value(record.result) if record.status == Status.COMPLETED else None,
        "error": error, "waiting": record.waiting, "wake_at": iso(record.wake_at),
        "priority": record.priority, "start_at": iso(record.start_at), "tags": dict(record.tags),
    }
    owner = owner_json(store, record)
    if owner is not None:
        doc["owner"] = owner
    if entries is not None:
        doc["entries"] = entries
    doc["children"] = list(dict.fromkeys(children))
    doc["continued_from"] = record.continued_from
    doc["continued_as"] = record.continued_as
    doc["forked_from"] = forked_from(store, record)
    if record.status == Status.FAILED:
        doc["retries"] = retries_json(store, record)
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
            out.append(promise_json(record, name))
    if record.wake_at is not None:  # a timer, or a delayed start (pending until then)
        out.append({"kind": "timer", "until": iso(record.wake_at)})
    return out


def limit_waits(store: Store, record: InvocationRecord) -> list[dict[str, Any]]:
    """The limits a running invocation's steps (or a pending one) wait for a unit of, in line:
    `{"kind": "limit", "name"}` each. None for a store whose limits cannot be read here (a
    read-only mount that never held any)."""
    if record.status not in (Status.RUNNING, Status.PENDING):
        return []
    try:
        names = store.limits().waiting_for(record.id)
    except StoreError:
        return []
    return [{"kind": "limit", "name": name} for name in names]


def promise_json(record: InvocationRecord, name: str) -> dict[str, Any]:
    """A promise a suspended invocation waits on: `{"kind": "promise", "name"}`, and for one
    awaited with a type, the type (`"type"`, as the code spells it), its JSON Schema
    (`"schema"`) and a value that fits it (`"example"`), for a form to start from."""
    doc: dict[str, Any] = {"kind": "promise", "name": name}
    typed = next((t for t in record.promise_types if t.name == name), None)
    if typed is not None:
        try:
            schema = msgspec.json.decode(typed.schema)
        except msgspec.DecodeError:
            schema = None
        doc.update(type=typed.type, schema=schema, example=example(schema) if isinstance(schema, dict) else None)
    return doc


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
        elif field == "traceback":
            if not value:
                continue  # none recorded (a failure journaled before tracebacks were)
            value = frames_json(value)
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


__all__ = ("children_of", "corrupt_view", "damaged_json", "listed_json", "decoded", "detail", "entry_view", "error_json", "export", "forked_from",
           "frames_json", "invocation_json", "iso", "owner_json", "promise_json", "record_json", "result_json", "retries_json",
           "state_json", "updated_us", "waiting_on")


def schedule_json(store: Store, schedule: ScheduleRecord) -> dict[str, Any]:
    """A schedule as `journal schedule show --json`, `ls --json` and `GET /schedules` give it:
    its definition, the next run (null while paused or once ended), the last runs with
    their invocations' status (null once trimmed), and the ticks skipped."""
    recent = []
    for fired in schedule.recent:
        record = store.get(fired.id)
        recent.append({"at": iso(fired.at), "id": fired.id, "status": record.status.value if record else None})
    return {
        "name": schedule.name, "target": schedule.target, "cron": schedule.cron, "every": schedule.every,
        "tz": schedule.tz, "overlap": schedule.overlap, "catch_up": schedule.catch_up, "jitter": schedule.jitter,
        "key": schedule.key, "priority": schedule.priority, "limits": list(schedule.limits),
        "start_at": iso(schedule.start_at), "end_at": iso(schedule.end_at),
        "paused": schedule.paused, "note": schedule.note,
        "next_run": None if schedule.paused else iso(schedule.next_tick),
        "last_run": recent[0] if recent else None, "skipped": schedule.skipped,
        "buffered": [iso(t) for t in schedule.buffered], "recent": recent,
    }
