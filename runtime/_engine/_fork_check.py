"""A fork's replaced values checked against the types the handler's code reads them as, before
anything is written: a promise's `type=`, a step's return type. Without it a fork with a
value of the wrong shape is created, then fails at once asking for a value it cannot be
given (a fork's values are set when it is made, never resolved later)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from journal import Acquire, Append, ForkError, InvocationRecord, MemoryStore, Status, Store, Transition, fork

from ..errors import NondeterminismError

_PROMISE_SEQ = re.compile(r"\(seq (\d+)\) was resolved with a value that does not fit")


def scratch(store: Store, source_id: str, at: int) -> MemoryStore:
    """A memory store holding a copy of `source_id`'s entries 0 … at-1 (nothing else)."""
    record = store.require(source_id)
    raw = [(seq, data) for seq, data in store.entries(source_id) if seq < at]
    scratch = MemoryStore(max_entry_bytes=store.max_entry_bytes)
    copy = InvocationRecord(source_id, record.handler, Status.PENDING, record.created_at, record.created_at,
                            record.key, record.input_digest)
    scratch.create(copy, raw[0][1])
    if len(raw) > 1:
        scratch.apply_one(Acquire(source_id, "check", "", 0, 60_000_000, record.created_at, ignore_queue=True))
        scratch.apply_one(Append(source_id, 1, raw[1:], Transition(Status.PENDING, record.created_at, release=True)))
    return scratch


async def refuse_unfit_values(handler: Callable[..., Any], copy: MemoryStore, source_id: str, at: int,
                              values: Mapping[int, bytes]) -> None:
    """Raise `ForkError` if a replaced value does not fit the type the code reads it as.

    `copy` is `scratch`'s: the copied prefix, with the values replaced, is replayed against `handler` in memory
    (no step runs, nothing is written): a replaced promise value the handler's `type=`
    refuses, or a replaced step result that no longer fits the step's return type, is
    refused here. Any other outcome of the replay (a divergence elsewhere, which a fork is
    often made to step past) is left to the fork's own run."""
    from .._handler._replay_journal import replay_outcome  # (the replayer's read-only driver)

    forked = fork(copy, source_id, at=at, new_id=f"{source_id[:180]}-check", values=dict(values))
    try:
        _, ended = await replay_outcome(handler, copy, forked.id)
    except NondeterminismError as exc:
        ended = exc
    if isinstance(ended, NondeterminismError):  # (raised by the replay, or through the handler)
        if ended.seq in values and "no longer fits its return type" in str(ended):
            raise ForkError(f"the value to put at seq {ended.seq} of {source_id!r} does not fit the step's return "
                            f"type: {_detail(str(ended))}; give a value of that type") from None
        return
    found = _PROMISE_SEQ.search(str(ended)) if ended is not None else None
    if found and int(found.group(1)) in values:
        message = str(ended).replace(f"-check' (seq {found.group(1)})", f"' (seq {found.group(1)})")
        raise ForkError(message.replace("; resolve it with a matching value", "; give the fork a value that fits"))


def _detail(message: str) -> str:
    """The decoding error of a divergence report (its last line that says what failed)."""
    for line in reversed(message.splitlines()):
        if "decoding the recorded result" in line:
            return line.strip().removeprefix("- ").strip()
    return message.splitlines()[0]
