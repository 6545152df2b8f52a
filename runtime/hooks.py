"""Observers: what happens to the invocations an engine runs, for tracing, metrics, progress.

An `Observer` is told when an invocation is being started (and may give a trace context
to journal with it) and once it was created, of each attempt at running one, of each step as it finishes, of
an invocation parked because its handler does not load here, of one a worker leaves
alone (its record is damaged, or no code is given here for the name it records), and of
a worker that pauses while its store cannot write (a full disk) and goes on after. Give observers to
`Engine(observers=[...])`, or add one with `engine.observe(observer)`. Every method does
nothing by default: override the ones you need.

    from runtime import Engine
    from runtime.hooks import Observer, StepEvent

    class Slow(Observer):
        def step(self, event: StepEvent) -> None:
            if event.how == "live" and event.seconds > 1.0:
                print(f"{event.invocation_id}: step {event.name} took {event.seconds:.1f} s")

    async with Engine.open(path, observers=[Slow()]) as engine: ...

OpenTelemetry (`runtime.otel`) is an observer, and so are the progress lines of the
`journal` command and the step counts of `journal serve`. An engine made without
`observers=` has the default ones (`default_observers()`): those that plugins registered
with `add_default`, as `import runtime.otel` does for OpenTelemetry's (which records
nothing unless the application configured an OpenTelemetry SDK).

Observers run on the event loop, in the invocation's own task, while the invocation
waits for them: keep them quick. What one raises goes up into the run as any error does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from journal import InvocationRecord, Status


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run of an invocation: the first one, or a resume after a crash, a wait or a move."""

    invocation_id: str
    handler: str  # the name or path the invocation records
    epoch: int  # its lease's epoch: 1 for the first attempt, one more for each after it
    trace: str | None  # the W3C traceparent journaled when the invocation started, if any
    # Whether it was taken over: `running` under another owner's lease, which had run out
    # or whose owner was gone (a crash, a partition), when this attempt took the lease.
    took_over: bool = False


@dataclass(frozen=True, slots=True)
class StepEvent:
    """A step that finished: run `live`, ended in an error that was journaled (`failed`),
    or `replayed` from the journal without running."""

    invocation_id: str
    name: str
    how: str  # "live", "failed" or "replayed"
    seconds: float  # how long the step function ran (0 for a replayed step)


class AttemptObserver:
    """Follows one attempt for one observer: entered as the handler starts, exited when the
    attempt ends however it ends (with the exception that stopped it from outside, if one did)."""

    def __enter__(self) -> AttemptObserver:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        return None

    def wrap_step(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """What runs instead of each live step function of the attempt (`fn` itself by default)."""
        return fn

    def ended(self, status: Status, record: InvocationRecord | None, replayed: int) -> None:
        """How the attempt left the invocation (`status`, its `record`), and how many journaled
        entries it replayed instead of running."""


class Observer:
    """What an engine tells about the invocations it runs (see the module's docstring)."""

    def trace_context(self, invocation_id: str, handler: str, parent: str | None) -> str | None:
        """A W3C traceparent to journal with an invocation being started (`parent`: the
        invocation starting it with `ctx.call`/`ctx.send`), or None; the first observer that
        gives one decides. Every attempt of the invocation gets it as `Attempt.trace`."""
        return None

    def created(self, record: InvocationRecord) -> None:
        """This engine created an invocation (`start`, `run`, `ctx.call`, `ctx.send`); not told
        of one that existed already, which the call attached to."""

    def attempt(self, attempt: Attempt) -> AttemptObserver | None:
        """An attempt begins: what follows it for this observer, or None."""
        return None

    def step(self, event: StepEvent) -> None:
        """A step finished."""

    def parked(self, invocation_id: str, reason: str) -> None:
        """A worker parked the invocation (`diverged`): its handler does not load here."""

    def skipped(self, invocation_id: str, reason: str) -> None:
        """A worker leaves the invocation alone, and says why once: its record is damaged, or it
        records a handler name this worker was given no code for (it stays `pending`)."""

    def paused(self, reason: str) -> None:
        """A worker stopped taking work because its store cannot write (its disk is full): the
        invocations stay `pending`, and it tries again every few seconds."""

    def went_on(self) -> None:
        """A worker that `paused` could write again, and goes on."""


# What `add_default` registered: each is called for every engine made without `observers=`.
_DEFAULTS: list[Callable[[], Observer]] = []


def add_default(factory: Callable[[], Observer]) -> None:
    """Give every engine made from now on without `observers=` an observer made by `factory`.

    How a plugin turns itself on: `import runtime.otel` registers OpenTelemetry's observer
    this way, so that the core names no plugin. Registering the same factory again does
    nothing."""
    if factory not in _DEFAULTS:
        _DEFAULTS.append(factory)


def default_observers() -> list[Observer]:
    """The observers of an engine made without `observers=`: one from each factory given
    to `add_default` (none until a plugin registers one)."""
    return [factory() for factory in _DEFAULTS]


class Observers:
    """The observers of one engine, told as one (what the engine's code calls)."""

    __slots__ = ("_all", "_steps", "_parks", "_skips", "_pauses", "_creates")

    def __init__(self, observers: Iterable[Observer]) -> None:
        self._all: list[Observer] = []
        self._steps: list[Observer] = []  # only those that override `step`: a step pays for no other
        self._parks: list[Observer] = []
        self._skips: list[Observer] = []
        self._pauses: list[Observer] = []
        self._creates: list[Observer] = []
        for observer in observers:
            self.add(observer)

    def add(self, observer: Observer) -> None:
        self._all.append(observer)
        if type(observer).step is not Observer.step:
            self._steps.append(observer)
        if type(observer).parked is not Observer.parked:
            self._parks.append(observer)
        if type(observer).skipped is not Observer.skipped:
            self._skips.append(observer)
        if type(observer).paused is not Observer.paused or type(observer).went_on is not Observer.went_on:
            self._pauses.append(observer)
        if type(observer).created is not Observer.created:
            self._creates.append(observer)

    def trace_context(self, invocation_id: str, handler: str, parent: str | None = None) -> str | None:
        for observer in self._all:
            found = observer.trace_context(invocation_id, handler, parent)
            if found is not None:
                return found
        return None

    def created(self, record: InvocationRecord) -> None:
        for observer in self._creates:
            observer.created(record)

    def attempt(self, attempt: Attempt) -> list[AttemptObserver]:
        return [found for observer in self._all if (found := observer.attempt(attempt)) is not None]

    def step_reporter(self, invocation_id: str) -> Callable[[str, str, float], None] | None:
        """What a context calls as each step finishes, or None when no observer listens (so a
        step pays one test)."""
        steps = self._steps
        if not steps:
            return None

        def report(name: str, how: str, seconds: float) -> None:
            event = StepEvent(invocation_id, name, how, seconds)
            for observer in steps:
                observer.step(event)

        return report

    def parked(self, invocation_id: str, reason: str) -> None:
        for observer in self._parks:
            observer.parked(invocation_id, reason)

    def skipped(self, invocation_id: str, reason: str) -> None:
        for observer in self._skips:
            observer.skipped(invocation_id, reason)

    def paused(self, reason: str) -> None:
        for observer in self._pauses:
            observer.paused(reason)

    def went_on(self) -> None:
        for observer in self._pauses:
            observer.went_on()


__all__ = ("Attempt", "AttemptObserver", "Observer", "StepEvent", "add_default", "default_observers")
