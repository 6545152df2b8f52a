"""What an operator does to an invocation besides resolving and cancelling it, written once for
the command line and the HTTP API (`Engine.check_resumable`, `Engine.fork`, `Engine.retry`):
the checks and the store writes, never how the answer is shown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from journal import FINISHED, InvocationRecord, Status, Store, UnencodableValue, encode_value, fork, now_us, retry_fork
from journal.errors import InvocationBusy
from journal.views import owner_json

from ..errors import NotResumable


def check_resumable(store: Store, invocation_id: str, *, finished_ok: bool = False) -> InvocationRecord:
    """The record of an invocation that may be resumed here; else the error that says why not.

    Pending, suspended and diverged invocations may be; a running one only once its owner is
    known dead (`InvocationBusy` otherwise, naming the owner); a finished one never
    (`NotResumable`: `journal retry` or `journal fork` start a new one from its journal),
    unless `finished_ok` (`journal resume` then reports how it ended, as it always has)."""
    record = store.require(invocation_id)
    while record.continued_as is not None:  # the logical run goes on in its latest generation
        record = store.require(record.continued_as)
    if record.status in FINISHED and not finished_ok:
        what = (f"`journal retry {record.id}` runs it again from before its failing step, "
                if record.status == Status.FAILED else "")
        raise NotResumable(
            f"invocation {record.id!r} is {record.status.value}: there is nothing left to resume; "
            f"{what}`journal fork {record.id} --at SEQ` starts a new invocation from a prefix of its journal")
    if record.status == Status.RUNNING:
        owner = owner_json(store, record, now_us())
        if owner is not None and owner["alive"]:
            raise InvocationBusy(
                f"invocation {record.id!r} is running in process {owner['pid']} on {owner['host']}, which is alive: "
                f"it is not resumed twice. Wait for it (`journal show {record.id}`), or cancel it "
                f"(`journal cancel {record.id}`); once its owner is gone, `journal resume {record.id}` takes it over")
    return record


def fork_with(store: Store, invocation_id: str, *, at: int, values: Mapping[int, Any] | None = None,
              new_id: str | None = None) -> InvocationRecord:
    """`journal.fork` with replaced values given as values (JSON-like data), not bytes."""
    raw: dict[int, bytes] = {}
    for seq, value in (values or {}).items():
        try:
            raw[int(seq)] = bytes(encode_value(value))
        except UnencodableValue as exc:
            raise ValueError(f"the value to put at seq {seq} cannot be journaled: {exc}") from None
    record = fork(store, invocation_id, at=at, new_id=new_id, values=raw)
    store.sync()
    return record


def retry(store: Store, invocation_id: str, *, new_id: str | None = None, force: bool = False) -> InvocationRecord:
    """`journal.retry_fork`, made durable."""
    record = retry_fork(store, invocation_id, new_id=new_id, force=force)
    store.sync()
    return record
