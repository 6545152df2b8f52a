"""OpenTelemetry traces of invocations (extra `journal-agents[otel]`), as an observer
(`runtime.hooks`), recording only when the application configured an SDK tracer provider.

- Starting an invocation journals a W3C `traceparent` in its `started` entry: the caller's
  current span, else a short `journal.start` span opening a trace of its own. Every attempt
  (the first run, a resume after kill -9, a worker picking it up) is a child of it, and so
  are child invocations started from inside it: the whole logical run is one trace.
- Each attempt is a span (`journal.attempt HANDLER`) counting the entries it replayed; a
  failure or a divergence marks it as an error.
- Each live step attempt is a span (`journal.step NAME`) current while the step function
  runs, so the spans of instrumented clients called by the step nest under it.

Cost when off: nothing is imported; each attempt asks `enabled()` (a dict look-up), and a
step pays one attribute test in the context (W1, docs/observability.md).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

from journal import InvocationRecord, Status

from .. import current_step
from ..hooks import Attempt as AttemptInfo
from ..hooks import AttemptObserver, Observer

_TRACER_NAME = "journal"


def _trace_api() -> Any:
    """`opentelemetry.trace` if the application imported it and installed a real provider."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return trace


def enabled() -> bool:
    return _trace_api() is not None


def _tracer(trace: Any) -> Any:
    return trace.get_tracer(_TRACER_NAME)


def start_context(invocation_id: str, handler: str, *, parent: str | None = None) -> str | None:
    """The `traceparent` to journal in a new invocation's `started` entry (None when off)."""
    trace = _trace_api()
    if trace is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    current = trace.get_current_span().get_span_context()
    carrier: dict[str, str] = {}
    if current.is_valid:  # inside the caller's span (a request, a parent invocation's attempt or step)
        TraceContextTextMapPropagator().inject(carrier)
    else:
        attributes = {"journal.invocation.id": invocation_id, "journal.handler": handler}
        if parent is not None:
            attributes["journal.parent.id"] = parent
        with _tracer(trace).start_as_current_span("journal.start", attributes=attributes):
            TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


class Attempt(AttemptObserver):
    """One run of an invocation as a span; `None` from `attempt()` when tracing is off."""

    def __init__(self, trace: Any, invocation_id: str, handler: str, traceparent: str | None, epoch: int) -> None:
        from opentelemetry import context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._context = context
        self._tracer = _tracer(trace)
        parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent}) if traceparent else None
        self.span = self._tracer.start_span(
            f"journal.attempt {_short(handler)}", context=parent,
            attributes={"journal.invocation.id": invocation_id, "journal.handler": handler,
                        "journal.lease.epoch": epoch},
        )
        self._token: Any = None

    def __enter__(self) -> Attempt:
        self._token = self._context.attach(self._trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        self._context.detach(self._token)
        if exc is not None:  # stopped from outside (SIGTERM, Ctrl-C) or a store failure
            self.span.set_attribute("journal.interrupted", True)
            if isinstance(exc, Exception):
                self.span.record_exception(exc)
                self.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        self.span.end()

    def ended(self, status: Status, record: InvocationRecord | None, replayed: int) -> None:
        """Record how the attempt ended: its status, the entries it replayed, an error."""
        span = self.span
        span.set_attribute("journal.status", status.value)
        span.set_attribute("journal.replayed_entries", replayed)
        for key, value in (record.tags.items() if record is not None else ()):  # those set by ctx.tag included
            span.set_attribute(f"journal.tag.{key}", value)
        error = None
        if status == Status.DIVERGED and record is not None:
            error = ("NondeterminismError", record.divergence or "the handler diverged from its journal")
        elif status == Status.FAILED and record is not None and record.error is not None:
            error = (record.error.type, record.error.message)
        if error is not None:
            span.add_event("exception", {"exception.type": error[0], "exception.message": error[1]})
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{error[0]}: {error[1]}"))

    def wrap_step(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` run inside a span per attempt, current while it runs (failures recorded as errors)."""
        tracer = self._tracer

        @functools.wraps(fn)
        async def traced(*args: Any, **kwargs: Any) -> Any:
            info = current_step()
            attributes = {"journal.invocation.id": info.invocation_id, "journal.step.seq": info.seq,
                          "journal.step.name": info.name, "journal.step.attempt": info.attempt,
                          "journal.step.idempotency_key": info.idempotency_key}
            with tracer.start_as_current_span(f"journal.step {info.name}", attributes=attributes):
                value = fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
                return value

        return traced


class OpenTelemetry(Observer):
    """The observer that traces invocations: a span per attempt and per live step, the trace
    context journaled at start (module docstring). Records nothing while no SDK tracer
    provider is installed, and asks again at every attempt."""

    def trace_context(self, invocation_id: str, handler: str, parent: str | None) -> str | None:
        return start_context(invocation_id, handler, parent=parent) if enabled() else None

    def attempt(self, attempt: AttemptInfo) -> Attempt | None:
        trace = _trace_api()
        if trace is None:
            return None
        return Attempt(trace, attempt.invocation_id, attempt.handler, attempt.trace, attempt.epoch)


def _short(handler: str) -> str:
    """The function's name: span names stay few (the full path is the `journal.handler` attribute)."""
    return handler.rpartition(":")[2] or handler
