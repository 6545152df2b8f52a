"""Comparing a run that crashed and resumed with the reference run.

Pure functions over what the runs left behind (the final record, the journal entries and
the step executions a `Session` counted); each returns a one-line description of the
first difference, or nothing.
"""

from __future__ import annotations

import collections
import hashlib
from typing import Any

import msgspec

from journal import Entry, InvocationRecord, Sleep, Status, decode_value, kind_of

from ._crash import Session, StepRun, describe_entry


def outcome_difference(reference: InvocationRecord, record: InvocationRecord) -> str | None:
    if _outcome(reference) == _outcome(record):
        return None
    return f"outcome: the reference run {_show_outcome(reference)}, this run {_show_outcome(record)}"


def _outcome(record: InvocationRecord) -> tuple[Any, ...]:
    error = None if record.error is None else (record.error.type, record.error.message)
    return (record.status, bytes(record.result), error)


def _show_outcome(record: InvocationRecord) -> str:
    if record.status == Status.COMPLETED:
        return f"completed with {_show_value(record.result)}"
    if record.status == Status.DIVERGED:
        return "diverged:\n    " + (record.divergence or "").replace("\n", "\n    ")
    if record.error is not None:
        return f"{record.status} with {record.error.type}: {record.error.message}"
    return f"ended {record.status}"


def journal_difference(reference: dict[int, Entry], entries: dict[int, Entry]) -> str | None:
    """The first entry one journal has and the other lacks, or None if they are the same.

    Entries are compared by their content *and their branch's path to them* (their `prev`
    token, a hash of the operations that led there), not by seq: concurrent branches may be scheduled in
    another order after a crash and number their entries differently, which is not a
    difference; a sequential path that changed order is.
    """
    want, got = _paths(reference), _paths(entries)
    if collections.Counter(want.values()) == collections.Counter(got.values()):
        return None
    missing = collections.Counter(want.values()) - collections.Counter(got.values())
    extra = collections.Counter(got.values()) - collections.Counter(want.values())
    firsts = [min((s for s, k in want.items() if k in missing), default=None),
              min((s for s, k in got.items() if k in extra), default=None)]
    seq = min(s for s in firsts if s is not None)
    mine, theirs = reference.get(seq), entries.get(seq)
    moved = (mine is not None and theirs is not None and _canonical(mine) == _canonical(theirs)
             and getattr(mine, "prev", 0) != getattr(theirs, "prev", 0))
    return (
        f"first difference in the journal at seq {seq}: the reference has {_show_entry(mine)}, "
        f"this run has {_show_entry(theirs)}"
        + ("; the same entry, reached by another path: its branch's position differs, so the task that made it "
           "was spawned at another place among its siblings (code that starts a task only sometimes, before it)"
           if moved else "")
    )


def _paths(entries: dict[int, Entry]) -> dict[int, bytes]:
    """Each entry's identity: its canonical content and its `prev` token, which already names
    the branch's path to it (a hash of the operations before it, see runtime/_handler/_invocation.py)."""
    return {
        seq: hashlib.blake2b(_path_encoder.encode((getattr(entry, "prev", 0), _canonical(entry))), digest_size=16).digest()
        for seq, entry in entries.items()
    }


_path_encoder = msgspec.msgpack.Encoder()
# `traceback`: where a failure was raised is diagnostic, and a step error replayed from the
# journal no longer has the frames of the step function that raised it live.
_IGNORED_FIELDS = frozenset({"at", "attempts", "prev", "traceback"})


def _canonical(entry: Entry) -> tuple[Any, ...]:
    """What must be equal between runs: everything but times, attempt counts and seq links (a sleep by its length)."""
    fields = []
    for field in entry.__struct_fields__:
        value = getattr(entry, field)
        if field == "until" and isinstance(entry, Sleep):
            value = entry.until - entry.at
        elif field in _IGNORED_FIELDS:
            continue
        if isinstance(value, msgspec.Raw):
            value = bytes(value)
        elif isinstance(value, msgspec.Struct):
            value = msgspec.structs.astuple(value)
        fields.append((field, value))
    return (kind_of(entry), *fields)


def _show_entry(entry: Entry | None) -> str:
    if entry is None:
        return "nothing"
    text = describe_entry(entry)
    error = getattr(entry, "error", None)
    if error is not None:
        message = error if isinstance(error, str) else f"{error.type}: {error.message}"
        return f"{text} failing with {_clip(message)}"
    value = getattr(entry, "value", None)
    if isinstance(value, msgspec.Raw):
        text += f" = {_show_value(value)}"
    digest = getattr(entry, "digest", None)
    if digest is not None:
        text += f" (args digest {digest:016x})"
    if isinstance(entry, Sleep):
        text += f" of {(entry.until - entry.at) / 1e6:g} s"
    return text


def _show_value(raw: msgspec.Raw | bytes) -> str:
    try:
        return _clip(repr(decode_value(raw)))
    except msgspec.DecodeError:
        return f"<{len(raw)} bytes>"


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def step_problems(session: Session, reference: Session | None) -> list[str]:
    """Step functions that ran more often than the reference plus what crashes caught in flight."""
    problems = []
    for key in sorted(session.runs):
        runs = session.runs[key]
        seq, name = key
        again = next((r for r in runs if r.committed_before), None)
        if again is not None:
            problems.append(
                f"step {name!r} (seq {seq}) ran again in process {again.process} although its outcome was "
                f"already committed; its runs: " + "; ".join(r.describe() for r in runs)
            )
            continue
        expected = 1 if reference is None else len(reference.runs.get(key, ())) or 1
        caught = sum(1 for r in runs if r.state == "crashed")
        if len(runs) > expected + caught:
            problems.append(_too_many(name, seq, runs, expected, caught))
    return problems


def _too_many(name: str, seq: int, runs: list[StepRun], expected: int, caught: int) -> str:
    allowed = expected + caught
    why = "it was never caught in flight by a crash" if caught == 0 else (
        f"only {caught} of its runs {'was' if caught == 1 else 'were'} caught in flight by a crash"
    )
    return (
        f"step {name!r} (seq {seq}) ran {len(runs)} times where {allowed} "
        f"{'is' if allowed == 1 else 'are'} allowed ({why}); its runs: " + "; ".join(r.describe() for r in runs)
    )
