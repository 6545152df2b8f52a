"""The families, and where each number comes from.

Two kinds, which add up differently when several processes are scraped:
- counters of this process (`*_total`, `journal_step_seconds`): what this process did since
  it started (invocations it created, attempts that ended here, steps it ran or replayed).
  Summed over every worker and server, they give the fleet's totals.
- counters of this process's store (`journal_store_commit_seconds`, the commits this
  process's engine made, and `journal_store_reconnects_total`, the times its store
  connected to its server again after losing it): summed like the counters above.
- gauges of the store (`journal_invocations`, `journal_queue_depth`,
  `journal_queue_oldest_seconds`): read at each scrape from the counts the store keeps as
  statuses change (`Store.summary`), never from the records, so a scrape costs the same at
  a hundred invocations or a million. Every process sharing a store reports the same
  values: take one (`max`), never the sum.
- gauges of the store's limits, budgets and schedules (`journal_limit_*`,
  `journal_budget_*`, `journal_schedule_lag_seconds`, `_fleet.py`): read at each scrape from
  their own tables, never from invocation records; the same from every process.

Label cardinality is bounded: `status` has seven values; `handler` is the name an
invocation records, of which a store may hold any number (`journal start NAME`), so past
`MAX_HANDLER_LABELS` names the rest are counted under `handler="other"` (the store's gauges
keep the busiest names; a process's counters the first names it meets). Step names are
never labels: a handler may make any number of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from journal import FINISHED, InvocationRecord, Status, Store
from journal.commit import Committer

from ..hooks import Attempt, AttemptObserver, Observer, StepEvent
from ._fleet import FleetGauges

# A `*_created` timestamp beside each counter doubles the series and means nothing to a
# dashboard here (a process's counters start with the process).
disable_created_metrics()  # type: ignore[no-untyped-call]  # (prometheus_client leaves it unannotated)

MAX_HANDLER_LABELS = 100
OTHER = "other"
_STATUSES = [s.value for s in Status]
# A step's duration, from a tool call of a few ms to a model call of minutes.
_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# A commit, from an LMDB transaction without fsync (tens of µs) to a PostgreSQL commit across
# a network, or an fsync on a slow disk (hundreds of ms).
_COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _Handlers:
    """The handler label of a name: itself for the first `limit` names, then `other`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, handler: str) -> str:
        if handler in self._known:
            return handler
        with self._lock:
            if len(self._known) < self.limit:
                self._known.add(handler)
                return handler
        return OTHER


class _StoreGauges(Collector):
    """The store's gauges, read at each scrape from `Store.summary` (counts, not records)."""

    def __init__(self, store: Store, limit: int) -> None:
        self._store = store
        self._limit = limit

    def collect(self) -> Iterator[GaugeMetricFamily]:
        summary = self._store.summary()
        now = time.time()
        # The busiest handlers keep their names; the rest add up under `other`.
        ranked = sorted(summary, key=lambda s: (-sum(s.counts.values()), s.handler))
        counts: dict[str, dict[str, int]] = {}
        oldest: dict[str, float] = {}
        for n, row in enumerate(ranked):
            label = row.handler if n < self._limit else OTHER
            into = counts.setdefault(label, {})
            for status, count in row.counts.items():
                into[status] = into.get(status, 0) + count
            if row.oldest_runnable_at is not None:
                oldest[label] = max(oldest.get(label, 0.0), now - row.oldest_runnable_at / 1e6)
        invocations = GaugeMetricFamily("journal_invocations", "Invocations in the store, by status and handler "
                                        "(a gauge of the store: the same from every process)",
                                        labels=["status", "handler"])
        depth = GaugeMetricFamily("journal_queue_depth", "Runnable (pending) invocations waiting for a worker, "
                                  "by handler (a gauge of the store)", labels=["handler"])
        oldest_age = GaugeMetricFamily("journal_queue_oldest_seconds", "How long the oldest runnable invocation has "
                                   "waited since it became runnable, by handler (0: none waits)", labels=["handler"])
        for label, by_status in sorted(counts.items()):
            for status in _STATUSES:
                invocations.add_metric([status, label], by_status.get(status, 0))
            depth.add_metric([label], by_status.get(Status.PENDING.value, 0))
            oldest_age.add_metric([label], round(max(0.0, oldest.get(label, 0.0)), 3))
        yield invocations
        yield depth
        yield oldest_age


class _StoreCounters(Collector):
    """The store's own count of reconnections, read at each scrape (a number it keeps: no read)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("journal_store_reconnects", "Times this process's store connected to its server "
                                  "again after losing it (a restart, a failover, a session ended; 0 for LMDB)",
                                  value=self._store.reconnects())


class _Attempt(AttemptObserver):
    def __init__(self, metrics: Metrics, attempt: Attempt) -> None:
        self._metrics = metrics
        self._attempt = attempt

    def __enter__(self) -> _Attempt:
        self._metrics._running[self._attempt.invocation_id] = self._metrics._handler(self._attempt.handler)
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        self._metrics._running.pop(self._attempt.invocation_id, None)

    def ended(self, status: Status, record: InvocationRecord | None, replayed: int) -> None:
        if status in FINISHED:
            self._metrics.finished.labels(self._metrics._handler(self._attempt.handler), status.value).inc()


class Metrics(Observer):
    """The metrics of one engine and its store: observe the engine with it, and serve
    `exposition()`. `max_handlers` bounds the `handler` label (see the module's docstring);
    given the engine's `committer`, it times each commit (`journal_store_commit_seconds`)."""

    def __init__(self, store: Store, *, committer: Committer | None = None,
                 max_handlers: int = MAX_HANDLER_LABELS) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._handler = _Handlers(max_handlers)
        self._running: dict[str, str] = {}  # invocation id -> handler label, while an attempt runs here
        self.started = Counter("journal_invocations_started", "Invocations this process created",
                               registry=self.registry)
        self.finished = Counter("journal_invocations_finished", "Attempts in this process that finished "
                                "their invocation, by handler and how (completed, failed, cancelled)",
                                ["handler", "status"], registry=self.registry)
        self.steps = Counter("journal_steps", "Steps this process ran (replayed=false) or replayed from the "
                             "journal (replayed=true), by handler", ["handler", "replayed"], registry=self.registry)
        self.step_seconds = Histogram("journal_step_seconds", "How long the step functions this process ran "
                                      "took, by handler", ["handler"], buckets=_STEP_BUCKETS, registry=self.registry)
        self.takeovers = Counter("journal_lease_takeovers", "Invocations this process took over: left running "
                                 "under a lease that had run out, or whose owner was gone", registry=self.registry)
        self.commit_seconds = Histogram("journal_store_commit_seconds", "How long the commits of this process's "
                                        "engine took (a group's transaction with its fsync, or one commit)",
                                        buckets=_COMMIT_BUCKETS, registry=self.registry)
        if committer is not None:
            committer.timers.append(self.commit_seconds.observe)
        self.registry.register(_StoreCounters(store))
        self.registry.register(_StoreGauges(store, max_handlers))
        self.registry.register(FleetGauges(store))

    def exposition(self) -> bytes:
        """The Prometheus text format of every family (reads the store's counts: off the event loop
        for a store that waits on the network)."""
        return generate_latest(self.registry)

    # -- what the engine tells ---------------------------------------------------------------

    def created(self, record: InvocationRecord) -> None:
        self.started.inc()

    def attempt(self, attempt: Attempt) -> AttemptObserver | None:
        if attempt.took_over:
            self.takeovers.inc()
        return _Attempt(self, attempt)

    def step(self, event: StepEvent) -> None:
        handler = self._running.get(event.invocation_id, OTHER)
        replayed = event.how == "replayed"
        self.steps.labels(handler, "true" if replayed else "false").inc()
        if not replayed:
            self.step_seconds.labels(handler).observe(event.seconds)
