"""Child invocations (`ctx.call`, `ctx.send`): their input checked, their creation journaled,
and an awaited child run in this process when nobody else runs it and its handler is here.

A child named by a registered NAME is recorded by that name, as `Engine.start` records one:
a worker given that handler runs it. A worker without the child's handler leaves the child
to one that has it, and the parent waits for it like any child (suspended on its result,
which wakes it when the child finishes wherever it ran)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from journal import (
    Committer,
    InvocationRecord,
    Started,
    Status,
    UnencodableValue,
    digest,
    encode_entry,
    encode_value,
    now_us,
)
from journal.errors import InvocationBusy

from .._replay._branches import _ORIGIN, _branch
from ..errors import TerminalError
from ..hooks import Observers
from ._composition import CHILD_PREFIX
from ._handlers import is_handler_name, load_handler, prepare_input, register


def child_input(target: Callable[..., Any] | str, input: Any) -> tuple[str, Any]:
    """The child's handler (its path, or a NAME) and its encoded input; a TerminalError if the
    input does not fit. A NAME is recorded as is, its input encoded but not checked, as
    `Engine.start` records one: the worker that has the handler checks it when it runs the
    child. (The same bytes wherever the parent runs, so its replay digests the same call.)"""
    if isinstance(target, str) and is_handler_name(target):
        try:
            return target, encode_value(input)
        except UnencodableValue as exc:
            raise TerminalError(f"cannot start child {target}: {exc}") from None
    fn = load_handler(target) if isinstance(target, str) else target
    path = register(fn)
    try:
        raw, _ = prepare_input(fn, input)
    except (ValueError, UnencodableValue) as exc:
        raise TerminalError(f"cannot start child {path}: {exc}") from None
    return path, raw


class Children:
    """What an engine's invocation contexts call to start and run their children."""

    def __init__(self, committer: Committer, running: set[str],
                 execute: Callable[[str], Awaitable[Any]], observers: Observers,
                 handler_for: Callable[[str], Callable[..., Any]]) -> None:
        self._committer = committer
        self._observers = observers
        self._handler_for = handler_for  # the engine's: which code runs a recorded handler here
        self._store = committer.store
        self._running = running  # the engine's: invocations executing in this process
        self._execute = execute

    child_input = staticmethod(child_input)

    def _runs_here(self, handler: str) -> bool:
        try:
            self._handler_for(handler)
        except Exception:  # noqa: BLE001 - not given to this worker, or its code does not load here
            return False
        return True

    async def create_child(self, parent: str, path: str, raw: Any, child_id: str, key: str | None,
                           delay: float | None) -> None:
        at = now_us()
        input_digest = digest(bytes(raw))
        record = InvocationRecord(child_id, path, Status.PENDING, at, at, key, input_digest, parent=parent)
        if delay:  # created asleep, in the same transaction: a worker wakes it when it is due
            record.status, record.wake_at = Status.SUSPENDED, at + int(delay * 1e6)
        # Inside the parent's attempt (or step) span: the child joins the parent's trace.
        trace = self._observers.trace_context(child_id, path, parent)
        started = encode_entry(Started(path, raw, at, key, input_digest, parent, trace), self._store.max_entry_bytes)
        created, fresh = await self._committer.create(record, started)
        if fresh:
            self._observers.created(created)

    async def run_child(self, child_id: str, _outer: frozenset[str] = frozenset()) -> None:
        """Run an awaited child here if nobody else is running it; it may finish or suspend.
        A child suspended in a ctx.call of its own gets its own child run first."""
        read, store = self._committer.read, self._store
        record = await read(store.get, child_id)
        if record is None:  # finished long ago and trimmed: its result is in the parent's journal
            return
        waiting = record.waiting
        if record.status == Status.SUSPENDED and waiting is not None and waiting.startswith(CHILD_PREFIX):
            grandchild = waiting[len(CHILD_PREFIX):]
            if grandchild not in _outer:
                await self.run_child(grandchild, _outer | {child_id})
                record = await read(store.require, child_id)
        runnable = record.status == Status.PENDING or (
            record.status == Status.RUNNING and await read(store.live_lease, child_id, now_us()) is None
        )
        if runnable and child_id not in self._running and self._runs_here(record.handler):
            # In a task of its own, so the child's context variables do not leak into the parent's;
            # spawned as no branch of the parent's handler, which does not spawn it on replay.
            outside = _branch.set(_ORIGIN)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._execute_if_free, child_id)
            finally:
                _branch.reset(outside)

    async def _execute_if_free(self, invocation_id: str) -> None:
        try:
            await self._execute(invocation_id)
        except InvocationBusy:
            pass
