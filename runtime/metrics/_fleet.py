"""The gauges of the store's limits, budgets and schedules, read at each scrape from their own
tables (`Store.limits`, the budget tables, `Store.schedules`), never from invocation records.

Label cardinality: a budget or a schedule is one an operator set, so their labels number as
many as there are budgets and schedules. A limit's label is a name with a rule, or a name
under a `PREFIX:*` rule (`tenant:acme`), of which there may be one per customer: past
`MAX_LIMIT_LABELS` names the busiest keep theirs and the rest add up under `limit="other"`.

`journal_schedule_lag_seconds` is how long a schedule's next tick has been due without being
fired, at the scrape: 0 while every tick fires on time, and for a paused or ended schedule.
A tick that fires late shows the lag growing until it fires; a schedule whose ticks nobody
fires (no worker runs, or none can reach the store) shows it growing without end, which is
the thing to alert on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from journal import Store
from journal.limits import BudgetBook, LimitView

MAX_LIMIT_LABELS = 100
_OTHER = "other"


def _bounded(views: list[LimitView]) -> dict[str, tuple[int, int, int]]:
    """`(in_use, waiting, tokens_total)` by label: the busiest names first, the rest as `other`."""
    named = [v for v in views if not v.name.endswith(":*")]  # a prefix rule holds nothing itself
    named.sort(key=lambda v: (-(v.in_use + v.waiting), -v.tokens_total, v.name))
    out: dict[str, tuple[int, int, int]] = {}
    for n, view in enumerate(named):
        label = view.name if n < MAX_LIMIT_LABELS else _OTHER
        in_use, waiting, tokens = out.get(label, (0, 0, 0))
        out[label] = (in_use + view.in_use, waiting + view.waiting, tokens + view.tokens_total)
    return out


class FleetGauges(Collector):
    """Limits, budgets and schedules, read at each scrape (a gauge of the store: the same from
    every process sharing it)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        now = time.time()
        yield from self._limits()
        yield from self._budgets(int(now * 1_000_000))
        yield self._schedules(int(now * 1_000_000))

    def _limits(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        in_use = GaugeMetricFamily("journal_limit_in_use", "Units of a limit held now by live holders "
                                   "(a gauge of the store)", labels=["limit"])
        waiting = GaugeMetricFamily("journal_limit_waiting", "Steps or invocations waiting in line for a unit "
                                    "of a limit (a gauge of the store)", labels=["limit"])
        tokens = CounterMetricFamily("journal_limit_tokens", "Tokens ever charged to a limit (the usage steps "
                                     "reported, else their estimate; kept by the store)", labels=["limit"])
        for label, (held, waits, used) in sorted(_bounded(self._store.limits().ls()).items()):
            in_use.add_metric([label], held)
            waiting.add_metric([label], waits)
            tokens.add_metric([label], used)
        yield in_use
        yield waiting
        yield tokens

    def _budgets(self, now_us: int) -> Iterator[GaugeMetricFamily]:
        used = GaugeMetricFamily("journal_budget_used", "What a budget's scope used in its current window "
                                 "(every run's together for per-run budgets), in tokens or cost", labels=["scope", "unit"])
        allowed = GaugeMetricFamily("journal_budget_allowed", "A budget's allowance per window, in tokens or "
                                    "cost (only the units it limits)", labels=["scope", "unit"])
        for view in BudgetBook(self._store).views(now_us):
            used.add_metric([view.scope, "tokens"], view.used_tokens)
            used.add_metric([view.scope, "cost"], round(view.used_cost, 9))
            if view.tokens is not None:
                allowed.add_metric([view.scope, "tokens"], view.tokens)
            if view.cost is not None:
                allowed.add_metric([view.scope, "cost"], view.cost)
        yield used
        yield allowed

    def _schedules(self, now_us: int) -> GaugeMetricFamily:
        lag = GaugeMetricFamily("journal_schedule_lag_seconds", "How long the schedule's next tick has been due "
                                "without being fired (0: on time, paused or ended)", labels=["schedule"])
        for schedule in self._store.schedules():
            at = schedule.due_at()
            lag.add_metric([schedule.name], round(max(0, now_us - at) / 1e6, 3) if at is not None else 0.0)
        return lag
