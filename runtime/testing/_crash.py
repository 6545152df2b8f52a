"""Simulated crashes for `check_determinism`.

A scenario runs one invocation through a series of simulated processes over one store
that survives them. Each process is a fresh `Engine` in a fresh event loop (so every task
it started dies with it, as in a real process) and sees the store through a
`_ProcessStore` view. The view counts the process's journal writes (store calls that
append entries) and, at the scheduled one, raises `_Crash` just before or just after
applying it; from then on it refuses every call, so nothing the dead process still tries
to do reaches the store. The next process expires the dead owner's lease (as the engine
does at once for a dead pid on the same host) and resumes the invocation.

Step functions are counted through `_CheckedContext`, a thin proxy the handler receives
instead of the engine's context: it wraps every function passed to `ctx.run` so that each
execution (attempt 1 of a `ctx.run`) is recorded with its seq and process, and whether
its outcome was committed, caught in flight by a crash, or neither.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from journal import (
    Append,
    Entry,
    Renew,
    Resolve,
    Step,
    Store,
    decode_entry,
    encode_value,
    kind_of,
    name_of,
    now_us,
)
from journal.errors import PromiseConflict

from .._base._step_info import StepInfo, current_step
from .._handler._context import Context
from .._handler._steps import return_type as _return_type
from ..errors import TerminalError


class CrashPoint(NamedTuple):
    """Where a simulated process dies: at its `write`-th journal write, before or after it.

    `write` counts the journal writes (commits of entries or of a status change) since the
    scenario started or since the previous crash. `before=True` kills the process after the
    work the write records was done but before it was committed: for a step, between its
    side effect and its commit. `before=False` kills it right after the commit.
    """

    write: int
    before: bool = False

    def __str__(self) -> str:
        return f"{'before' if self.before else 'after'} journal write {self.write}"


@dataclasses.dataclass(frozen=True)
class Failure:
    """A failure injected into every execution of a step, by step name.

    The first `times` attempts of each execution raise `InjectedFailure` (retried by the
    step's `RetryPolicy`) or, with `terminal=True`, `TerminalError` (which fails the step at
    once). The step function itself runs on the attempts that do not fail.
    """

    times: int = 1
    terminal: bool = False
    message: str = "injected failure"


class InjectedFailure(Exception):
    """The exception a `Failure` raises inside a step."""


class Reject(NamedTuple):
    """A promise outcome for `check_determinism(promises=...)`: reject it with `message`."""

    message: str


class _Crash(BaseException):
    """The simulated process died (a BaseException: handlers' `except Exception` must not stop it)."""


@dataclasses.dataclass
class StepRun:
    """One execution of a step function (all its attempts), as `check_determinism` saw it."""

    seq: int
    name: str
    process: int
    committed_before: bool  # the step's outcome was already committed when this execution began
    state: str = "running"  # running -> committed | crashed (in flight at a crash) | unjournaled
    returned: bool = False  # the function returned (on its last attempt)

    def describe(self) -> str:
        how = {
            "committed": "its outcome was committed",
            "crashed": "in flight when the process crashed",
            "unjournaled": "ended without its outcome being journaled"
            + (" (the function returned)" if self.returned else " (cancelled or failed before its commit)"),
            "running": "still running",
        }[self.state]
        return f"process {self.process}: {how}"


class Session:
    """One scenario: the surviving store, the crash schedule, and what the processes did."""

    def __init__(self, base: Store, invocation_id: str, schedule: Sequence[CrashPoint] = (),
                 failures: Mapping[str, Failure] | None = None) -> None:
        self.base = base
        self.invocation_id = invocation_id
        self.schedule = list(schedule)
        self.failures = dict(failures or {})
        self.process = 0
        self.current: _ProcessStore | None = None
        self.writes_since_crash = 0
        self.writes = 0  # every journal write of the scenario
        self.write_labels: list[str] = []
        self.crashes: list[tuple[CrashPoint, str]] = []  # the point, and what was being written
        # Step executions by (seq, name): the same seq may be reused for another step by a
        # resumed run whose concurrent branches were scheduled differently.
        self.committed: set[tuple[int, str]] = set()  # steps whose outcome is in the store
        self.runs: dict[tuple[int, str], list[StepRun]] = {}
        self.scheduled_resolutions: list[tuple[int, str, Any]] = []  # (after write, name, value)
        self.delivered: set[str] = set()

    # -- processes -----------------------------------------------------------------------

    def new_process(self) -> _ProcessStore:
        self.process += 1
        self.current = _ProcessStore(self)
        return self.current

    def end_process(self) -> None:
        for runs in self.runs.values():
            for run in runs:
                if run.process == self.process and run.state == "running":
                    run.state = "unjournaled"

    def expire_dead_lease(self) -> None:
        """What the engine does for a dead owner on the same host: its lease stops protecting it."""
        lease = self.base.lease(self.invocation_id)
        if lease is not None and lease.owner:
            self.base.apply([Renew(self.invocation_id, lease.epoch, 0, 0)])

    # -- journal writes ------------------------------------------------------------------

    def journal_write(self, view: _ProcessStore, ops: Sequence[Any]) -> list[Any]:
        self.writes += 1
        self.writes_since_crash += 1
        label = describe_write(ops)
        self.write_labels.append(label)
        point = self.schedule[0] if self.schedule else None
        if point is not None and point.write != self.writes_since_crash:
            point = None  # the next crash is due at a later write
        if point is not None and point.before:
            self._die(view, point, label)
        results = self.base.apply(ops)
        for op, result in zip(ops, results, strict=False):
            if isinstance(op, Append) and not isinstance(result, BaseException):
                for seq, data in op.entries:
                    entry = decode_entry(data)
                    if isinstance(entry, Step):
                        self._committed((seq, entry.name))
        self.deliver_due()
        if point is not None:
            self._die(view, point, label)
        return results

    def _committed(self, key: tuple[int, str]) -> None:
        self.committed.add(key)
        for run in reversed(self.runs.get(key, ())):
            if run.process == self.process and run.state == "running":
                run.state = "committed"
                break

    def _die(self, view: _ProcessStore, point: CrashPoint, label: str) -> None:
        view.dead = True
        self.schedule.pop(0)
        self.writes_since_crash = 0
        self.crashes.append((point, label))
        for runs in self.runs.values():
            for run in runs:
                if run.process == self.process and run.state == "running":
                    run.state = "crashed"
        self.deliver_due()
        raise _Crash()

    # -- promises from outside -------------------------------------------------------------

    def resolve(self, name: str, value: Any) -> None:
        if name in self.delivered:
            return
        self.delivered.add(name)
        if isinstance(value, Reject):
            op = Resolve(self.invocation_id, name, now_us(), None, value.message)
        else:
            op = Resolve(self.invocation_id, name, now_us(), bytes(encode_value(value)))
        (result,) = self.base.apply([op])
        if isinstance(result, PromiseConflict) and self.base.get(self.invocation_id).finished:  # type: ignore[union-attr]
            return  # it arrived after the invocation ended: nobody waits for it any more
        if isinstance(result, BaseException):
            raise result

    def deliver_due(self) -> None:
        for at, name, value in self.scheduled_resolutions:
            if at <= self.writes and name not in self.delivered:
                self.resolve(name, value)

    # -- step functions ----------------------------------------------------------------------

    def wrap(self, fn: Callable[..., Any], started: list[StepRun]) -> Callable[..., Any]:
        """`fn` counted: each execution is recorded, and appended to `started`."""
        session = self

        async def checked_step(*args: Any, **kwargs: Any) -> Any:
            info = current_step()
            run = session._step_started(info)
            if not started or started[-1] is not run:
                started.append(run)
            try:
                session._inject(info)
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
            except BaseException:
                run.returned = False
                raise
            run.returned = True
            return result

        return checked_step

    def call_ended(self, started: list[StepRun]) -> None:
        """The `ctx.run` call returned or raised: an execution not committed by then never will be."""
        for run in started:
            if run.state == "running":
                run.state = "unjournaled"

    def _step_started(self, info: StepInfo) -> StepRun:
        if self.current is None or self.current.dead:
            raise _Crash()  # a dead process runs no more side effects
        key = (info.seq, info.name)
        runs = self.runs.setdefault(key, [])
        if info.attempt == 1 or not runs or runs[-1].process != self.process:
            runs.append(StepRun(info.seq, info.name, self.process, key in self.committed))
        return runs[-1]

    def _inject(self, info: StepInfo) -> None:
        failure = self.failures.get(info.name)
        if failure is None:
            return
        if failure.terminal:
            raise TerminalError(failure.message)
        if info.attempt <= failure.times:
            raise InjectedFailure(f"{failure.message} (attempt {info.attempt})")


class _ProcessStore:
    """The store as one simulated process sees it; dead after its crash."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._base = session.base
        self.dead = False

    def __getattr__(self, name: str) -> Any:
        if self.dead:
            raise _Crash()
        return getattr(self._base, name)

    def apply(self, ops: Sequence[Any], *, durable: bool = True) -> list[Any]:
        # `durable` as the store protocol has it: the lease watcher renews with durable=False
        # once a run outlasts a third of its lease (a slow handler, a loaded machine).
        if self.dead:
            raise _Crash()
        if any(isinstance(op, Append) for op in ops):
            return self._session.journal_write(self, ops)
        return self._base.apply(ops, durable=durable)

    apply_one = Store.apply_one  # through `apply` above, which sees every journal write

    def create(self, *args: Any, **kwargs: Any) -> Any:
        if self.dead:
            raise _Crash()
        return self._base.create(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        if self.dead:
            raise _Crash()
        return self._base.delete(*args, **kwargs)

    def close(self) -> None:
        pass  # the store outlives its processes

    def __repr__(self) -> str:
        return f"<{self._base!r} as seen by a simulated process>"


class _CheckedContext:
    """The context the handler sees under `check_determinism`: the engine's, with counted steps."""

    def __init__(self, inner: Context, session: Session) -> None:
        self._inner = inner
        self._session = session

    @property
    def invocation_id(self) -> str:
        return self._inner.invocation_id

    async def run(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not callable(fn):
            return await self._inner.run(name, fn, *args, **kwargs)  # let the engine explain
        # The engine reads the return annotation of the function it is given: keep the user's.
        if kwargs.get("type") is None:
            kwargs["type"] = _return_type(fn)
        started: list[StepRun] = []
        try:
            return await self._inner.run(name, self._session.wrap(fn, started), *args, **kwargs)
        finally:
            self._session.call_ended(started)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return repr(self._inner)


Context.register(_CheckedContext)


def is_crash(exc: BaseException) -> bool:
    """Whether `exc` is (or is a group holding only) simulated crashes and their fallout."""
    if isinstance(exc, _Crash):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(_Crash) is not None
    return False


def describe_write(ops: Sequence[Any]) -> str:
    parts = []
    for op in ops:
        if not isinstance(op, Append):
            continue
        for seq, data in op.entries:
            parts.append(f"seq {seq}: {describe_entry(decode_entry(data))}")
        if op.transition is not None and not op.entries:
            parts.append(f"status {op.transition.status}")
    return ", ".join(parts) or "an empty append"


def describe_entry(entry: Entry) -> str:
    name = name_of(entry)
    return kind_of(entry) if name is None else f"{kind_of(entry)} {name!r}"
