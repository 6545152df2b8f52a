"""Parking an invocation that cannot run here: its status says so, and why.

One invocation whose code is gone (or whose journal is damaged) must not stop a worker
from running the others, nor be tried again at every poll. It is parked as `diverged`,
the status whose meaning is "the code does not fit this journal: fix it, then
`journal resume`", with the reason in its record, where `journal ls` and `show` find it.
One that stops before it ends (a store failure, a cancellation before it starts) is given
back: `pending`, with its lease released.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import anyio

from journal import HOST, Acquire, Committer, SetStatus, Status, Transition
from journal.errors import JournalError, StoreError

from ._clock import now_us
from .errors import HandlerNotFound

if TYPE_CHECKING:
    from ._engine import Engine


async def park(committer: Committer, invocation_id: str, epoch: int, reason: str) -> None:
    """Set the invocation `diverged` with `reason`, giving the lease (held at `epoch`) back."""
    await committer.submit(SetStatus(invocation_id, Transition(
        Status.DIVERGED, now_us(), divergence=reason, release=True), epoch), durable=True)


async def give_back(committer: Committer, invocation_id: str, epoch: int | None = None,
                    owner: str | None = None) -> None:
    """Give the lease back (held at `epoch`, or by `owner` if it is) and leave the invocation
    `pending`, to run again; if the store refuses, the lease runs out by itself."""
    try:
        await committer.submit(SetStatus(
            invocation_id, Transition(Status.PENDING, now_us(), release=True), epoch, owner), durable=True)
    except JournalError:
        pass


async def give_back_if_taken(committer: Committer, invocation_id: str, owner: str, exc: BaseException) -> None:
    """After a claim (`Create` with a lease, `Acquire`) ended in `exc` with no answer: the
    store may have taken the lease all the same (a native asyncio cancellation, which an
    anyio shield does not stop, or an fsync that failed after the commit), so give it back
    if `owner` holds it. A refusal by the store's rules took nothing."""
    if isinstance(exc, JournalError) and not isinstance(exc, StoreError):
        return
    with anyio.CancelScope(shield=True):
        await give_back(committer, invocation_id, owner=owner)


async def park_if_unloadable(engine: Engine, invocation_id: str) -> bool:
    """True if the invocation's handler loads here; else park it, tell `engine.on_park`, and
    return False. The lease is taken first: an invocation another process runs is left alone."""
    record = await engine.committer.read(engine.store.get, invocation_id)
    if record is None or record.finished:
        return True
    try:
        engine.handler_for(record.handler)
        return True
    except Exception as exc:  # noqa: BLE001 - any failure to import the handler's module
        reason = exc if isinstance(exc, HandlerNotFound) else f"importing it raised {type(exc).__name__}: {exc}"
    message = (f"invocation {invocation_id!r} cannot run: cannot load its handler {record.handler!r}: {reason}. "
               f"Restore or fix the code, then `journal resume {invocation_id}`")
    epoch, _ = await engine.committer.submit(
        Acquire(invocation_id, engine.owner, HOST, os.getpid(), int(engine.lease_ttl * 1e6), now_us()), durable=False)
    await park(engine.committer, invocation_id, epoch, message)
    if engine.on_park is not None:
        engine.on_park(invocation_id, message)
    return False
