"""`check_determinism`: crash a handler at every journal write, resume it, and compare.

The reference run executes the handler once on a fresh store. Then, for every journal
write N of the reference and both sides of it (just before: the work is done, the commit
is not; just after: committed), a scenario runs the handler again from scratch on a fresh
store, kills the simulated process at that point, resumes the invocation in a new one,
and requires at the end:

- the same outcome (status, result or error) as the reference;
- the same journal, entry by entry: kinds, names, argument digests, values and errors
  (times and attempt counts aside);
- every step function executed exactly as often as in the reference, except an execution
  caught in flight by a crash (started, outcome not committed), which may run once more.
  A step whose outcome was committed never runs again.

Extra `schedules` crash a scenario several times in a row. The first difference fails the
check with a `DeterminismCheckFailed` naming the crash point; otherwise a
`DeterminismReport` says what was covered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal

import anyio

from journal import (
    FINISHED,
    Durability,
    Entry,
    InvocationRecord,
    MemoryStore,
    RequestCancel,
    Status,
    Store,
    decode_entry,
    decode_value,
    now_us,
)

from .._engine._engine import Engine
from .._handler._guard import determinism_guard
from .._handler._handlers import _by_path, handler_path, load_handler
from ._compare import journal_difference, outcome_difference, step_problems
from ._crash import CrashPoint, Failure, Session, _CheckedContext, is_crash

PromiseTiming = Literal["start", "waiting"] | int
"""When a promise is resolved: "start" (before the handler first runs), "waiting" (once the
invocation suspends waiting for it), or N (right after the scenario's N-th journal write,
possibly while the handler runs; if the handler waits for it before that, when it waits)."""

_INVOCATION_ID = "determinism-check"
_MAX_PROCESSES = 1000
_ids = itertools.count(1)


class DeterminismCheckFailed(AssertionError):
    """A crash and resume did not reproduce the reference run (or the reference itself failed to run)."""

    def __init__(self, message: str, *, schedule: Sequence[CrashPoint] = (), crash_point: str | None = None,
                 difference: str | None = None) -> None:
        super().__init__(message)
        self.schedule = list(schedule)
        self.crash_point = crash_point
        self.difference = difference


@dataclasses.dataclass(frozen=True)
class DeterminismReport:
    """What a passing `check_determinism` covered."""

    handler: str
    status: Status  # how the reference run ended
    result: Any  # its result (decoded), if it completed
    entries: int  # entries in the reference journal
    writes: int  # journal writes of the reference run: crash points are both sides of each
    crash_points: int  # single crash points checked
    schedules: int  # multi-crash schedules checked
    runs: int  # scenarios run, the reference included
    crashes: int  # simulated crashes that happened
    processes: int  # simulated processes (engine lifetimes) in all
    reruns: int  # step executions repeated because a crash caught them in flight
    seconds: float

    def __str__(self) -> str:
        return (
            f"{self.handler}: {self.status} with {self.entries} entries; {self.crash_points} crash points "
            f"and {self.schedules} schedules in {self.runs} runs ({self.crashes} crashes, {self.processes} "
            f"processes, {self.reruns} in-flight steps run again) in {self.seconds:.2f} s"
        )


@dataclasses.dataclass
class _Spec:
    handler: Callable[..., Any]
    input: Any
    promises: dict[str, Any]
    promise_timing: dict[str, PromiseTiming]
    failures: dict[str, Failure]
    cancel: str | None
    guard: bool
    durability: Durability
    backend: str
    engine_options: dict[str, Any]
    store_factory: Callable[[], Store]
    max_timer_wait: float


@dataclasses.dataclass
class _Result:
    record: InvocationRecord
    entries: dict[int, Entry]
    session: Session
    processes: int


def check_determinism(
    handler: Callable[..., Any] | str,
    input: Any = None,
    *,
    promises: Mapping[str, Any] | None = None,
    promise_timing: Mapping[str, PromiseTiming] | None = None,
    failures: Mapping[str, Failure] | None = None,
    cancel: Literal["start", "suspended"] | None = None,
    schedules: Iterable[Sequence[CrashPoint]] = (),
    single_crashes: bool = True,
    guard: bool = True,
    durability: Durability | str = Durability.SYNC,
    backend: str = "asyncio",
    engine_options: Mapping[str, Any] | None = None,
    store_factory: Callable[[], Store] = MemoryStore,
    max_timer_wait: float = 10.0,
) -> DeterminismReport:
    """Check that `handler` survives a crash at any journal write with the same outcome and journal.

    Runs the handler once for a reference, then once per crash point (both sides of every
    journal write of the reference) and once per schedule in `schedules`, each on a fresh
    store from `store_factory`. Raises `DeterminismCheckFailed` naming the crash point and
    the first difference; returns a `DeterminismReport` when every run matched.

    - `promises`: the value delivered to each promise the handler awaits (`Reject(msg)`
      rejects it); `promise_timing` says when, per name (default "waiting", see
      `PromiseTiming`).
    - `failures`: step name -> `Failure` injected into every execution of that step.
    - `cancel`: request cancellation before the handler first runs ("start"), or at its
      first suspension ("suspended").
    - `guard`: run the handler under `determinism_guard()` (on by default).
    - `durability`: "sync" or "async" ("exit" loses entries at a crash by design).
    - `backend`: the anyio backend each simulated process runs on ("asyncio" or "trio").
    - `engine_options`: passed to `Engine` (e.g. `inline_sleep_limit=0` to suspend at
      every `ctx.sleep`).
    - `max_timer_wait`: durable timers are waited for in real time; a longer one is an
      error (make the duration an input of the handler, and short in tests).

    It runs event loops of its own, so call it from synchronous code (a plain test
    function); from async code, `await anyio.to_thread.run_sync(functools.partial(...))`.

    The comparison with the reference assumes the handler is deterministic given what it
    journals. Concurrent branches may be scheduled in any order, but branches that race
    (one cancels the others, or they share `ctx.random()`) can legitimately journal another
    interleaving when a crashed run starts over; see docs/testing.md.
    """
    if _in_event_loop():
        raise RuntimeError(
            "check_determinism runs event loops of its own and cannot be called from async code; call it "
            "from a synchronous test, or `await anyio.to_thread.run_sync(functools.partial(check_determinism, "
            "handler, input, ...))`"
        )
    if isinstance(handler, str):
        handler = load_handler(handler)
    durability = Durability(durability)
    if durability is Durability.EXIT:
        raise ValueError(
            'check_determinism needs durability "sync" or "async": in "exit" mode entries are kept in memory '
            "until the invocation suspends or ends, so a crash loses them (and re-runs their steps) by design"
        )
    spec = _Spec(
        handler=handler, input=input, promises=dict(promises or {}), promise_timing=dict(promise_timing or {}),
        failures=dict(failures or {}), cancel=cancel, guard=guard, durability=durability, backend=backend,
        engine_options=dict(engine_options or {}), store_factory=store_factory, max_timer_wait=max_timer_wait,
    )
    unknown = set(spec.promise_timing) - set(spec.promises)
    if unknown:
        raise ValueError(f"promise_timing names promises without a value in promises=: {', '.join(sorted(unknown))}")
    if cancel not in (None, "start", "suspended"):
        raise ValueError(f'cancel must be None, "start" or "suspended", got {cancel!r}')
    started = time.perf_counter()
    checked, path = _checked_handler(handler)
    try:
        reference = _run_scenario(spec, checked, ())
        name = handler_path(handler)
        _check_reference(name, reference)
        points = []
        if single_crashes:
            points = [[CrashPoint(n, before)] for n in range(1, reference.session.writes + 1) for before in (True, False)]
        extra = [list(s) for s in schedules]
        crashes = processes = reruns = 0
        for schedule in points + extra:
            result = _run_scenario(spec, checked, schedule)
            _compare(name, reference, result, schedule)
            crashes += len(result.session.crashes)
            processes += result.processes
            reruns += sum(1 for runs in result.session.runs.values() for run in runs if run.state == "crashed")
    finally:
        _by_path.pop(path, None)
    record = reference.record
    return DeterminismReport(
        handler=name,
        status=record.status,
        result=decode_value(record.result) if record.status == Status.COMPLETED else None,
        entries=len(reference.entries),
        writes=reference.session.writes,
        crash_points=len(points),
        schedules=len(extra),
        runs=1 + len(points) + len(extra),
        crashes=crashes,
        processes=processes + reference.processes,
        reruns=reruns,
        seconds=time.perf_counter() - started,
    )


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
            return True
        except RuntimeError:
            pass
    return False


def _checked_handler(handler: Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    """The handler as the engine runs it: same signature, fed a `_CheckedContext`.

    It is registered under a path of its own, so the user's handler stays what its path loads.
    """

    @functools.wraps(handler)
    async def checked(ctx: Any, *args: Any) -> Any:
        return await handler(_CheckedContext(ctx, _session.get()), *args)

    path = f"{handler_path(handler)}[determinism-check-{next(_ids)}]"
    checked.__journal_path__ = path  # type: ignore[attr-defined]
    return checked, path


# The scenario the current simulated process belongs to (set in each process's event loop).
_session: ContextVar[Session] = ContextVar("journal_check_session")


def _run_scenario(spec: _Spec, checked: Callable[..., Any], schedule: Sequence[CrashPoint]) -> _Result:
    store = spec.store_factory()
    try:
        session = Session(store, _INVOCATION_ID, schedule, spec.failures)
        for name, timing in spec.promise_timing.items():
            if isinstance(timing, int) and not isinstance(timing, bool):
                session.scheduled_resolutions.append((timing, name, spec.promises[name]))
            elif timing not in ("start", "waiting"):
                raise ValueError(f'promise_timing[{name!r}] must be "start", "waiting" or a write number, got {timing!r}')
        processes = _drive(spec, checked, session)
        record = store.get(_INVOCATION_ID)
        assert record is not None
        entries = {seq: decode_entry(data) for seq, data in store.entries(_INVOCATION_ID)}
        return _Result(record, entries, session, processes)
    finally:
        store.close()


def _drive(spec: _Spec, checked: Callable[..., Any], session: Session) -> int:
    """Run the invocation to its end through as many simulated processes as it takes."""
    cancel_pending = spec.cancel == "suspended"
    outcome = _process(spec, checked, session, first=True)
    for processes in range(1, _MAX_PROCESSES):
        if outcome is None:  # crashed: the next process takes over
            session.expire_dead_lease()
        elif outcome.status in FINISHED or outcome.status == Status.DIVERGED:
            return processes
        elif outcome.status == Status.SUSPENDED:
            if cancel_pending:
                cancel_pending = False
                session.base.apply([RequestCancel(_INVOCATION_ID, now_us())])
            elif outcome.waiting is not None:
                if outcome.waiting not in spec.promises:
                    raise ValueError(
                        f"the handler waits for promise {outcome.waiting!r}, which check_determinism was not given "
                        f"a value for; pass promises={{{outcome.waiting!r}: ...}}"
                    )
                session.resolve(outcome.waiting, spec.promises[outcome.waiting])
            elif outcome.wake_at is not None:
                wait = outcome.wake_at.timestamp() - time.time()
                if wait > spec.max_timer_wait:
                    raise ValueError(
                        f"the handler sleeps on a durable timer due in {wait:.0f} s, longer than "
                        f"max_timer_wait={spec.max_timer_wait:g}: check_determinism waits for timers in real time; "
                        "make the duration an input of the handler and keep it short in tests"
                    )
                time.sleep(max(0.0, wait))
        outcome = _process(spec, checked, session, first=False)
    raise DeterminismCheckFailed(f"the invocation did not finish after {_MAX_PROCESSES} simulated processes")


def _process(spec: _Spec, checked: Callable[..., Any], session: Session, *, first: bool) -> Any:
    """One simulated process: a fresh engine and event loop. Returns its outcome, or None if it crashed."""
    view = session.new_process()

    async def main() -> Any:
        _session.set(session)
        engine = Engine(view, durability=spec.durability, **spec.engine_options)
        with determinism_guard(spec.guard):
            if first:
                await engine.start(checked, spec.input, id=_INVOCATION_ID)
                for name, timing in spec.promise_timing.items():
                    if timing == "start":
                        session.resolve(name, spec.promises[name])
                if spec.cancel == "start":
                    session.base.apply([RequestCancel(_INVOCATION_ID, now_us())])
            return await engine.resume(_INVOCATION_ID)

    try:
        return anyio.run(main, backend=spec.backend)
    except BaseException as exc:
        if view.dead and is_crash(exc):
            return None
        raise
    finally:
        session.end_process()


# -- comparing runs ----------------------------------------------------------------------------


def _check_reference(name: str, reference: _Result) -> None:
    record = reference.record
    if record.status == Status.DIVERGED:
        raise DeterminismCheckFailed(
            f"check_determinism({name}): the reference run, without any crash, stopped as diverged:\n"
            f"{record.divergence}",
            difference=record.divergence,
        )
    problems = step_problems(reference.session, None)
    if problems:
        raise DeterminismCheckFailed(
            f"check_determinism({name}): in the reference run, without any crash:\n  " + "\n  ".join(problems),
            difference=problems[0],
        )


def _compare(name: str, reference: _Result, result: _Result, schedule: Sequence[CrashPoint]) -> None:
    differences = []
    outcome = outcome_difference(reference.record, result.record)
    journal = journal_difference(reference.entries, result.entries)
    if journal is not None:
        differences.append(journal)
    if outcome is not None:
        differences.append(outcome)
    differences += step_problems(result.session, reference.session)
    if not differences:
        return
    crashes = result.session.crashes
    if crashes:
        where = "; then ".join(f"crashed {point} ({label})" for point, label in crashes)
    else:
        where = f"was scheduled to crash at {', '.join(map(str, schedule))} but never reached it"
    raise DeterminismCheckFailed(
        f"check_determinism({name}): the run that {where} and resumed does not match the reference run:\n  "
        + "\n  ".join(differences)
        + f"\nCrash schedule: {list(schedule)!r}",
        schedule=schedule,
        crash_point=where,
        difference=differences[0],
    )
