"""A scrape reads the store's counts, never its records: counted with a store that counts
its reads (not timed), over 10,000 invocations of 150 handlers (past the label bound)."""

from __future__ import annotations

import os

from prometheus_client.parser import text_string_to_metric_families

from journal import HOST, ScheduleRecord, SetStatus, Status, Transition
from journal.limits import BudgetBook, BudgetRule, LimitRule, Request
from journal.testing import creation_op
from runtime.metrics import MAX_HANDLER_LABELS, Metrics

from ..journal.test_listing_reads import CountingStore


def test_a_scrape_reads_no_record_and_bounds_the_handler_label():
    store = CountingStore()
    for start in range(0, 10_000, 1_000):
        store.apply([creation_op(f"inv-{n:05d}", n, at=1_000_000 + n, handler=f"pkg.mod:h{n % 150:03d}")
                     for n in range(start, start + 1_000)])
    store.apply([SetStatus(f"inv-{n:05d}", Transition(Status.FAILED, 2_000_000)) for n in range(0, 10_000, 7)])
    # A limit with a holder, a budget and a schedule: their families read their own tables.
    store.limits().set("db", LimitRule(concurrency=4))
    assert str(store.limits().acquire(Request("h", ("db",), "test", HOST, os.getpid()))) == "Granted()"
    BudgetBook(store).set("key:acme", BudgetRule(tokens=100))
    store.put_schedule(ScheduleRecord(name="nightly", target="pkg.mod:h000", every=86_400.0, next_tick=1))
    metrics = Metrics(store)
    store.reads.clear()
    text = metrics.exposition().decode()
    assert store.reads["invocations"] == 0 and store.reads["scanned invocations"] == 0, store.reads
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [(s.labels, s.value) for s in families["journal_limit_in_use"].samples] == [({"limit": "db"}, 1)]
    assert {s.labels["scope"] for s in families["journal_budget_used"].samples} == {"key:acme"}
    assert [s.labels for s in families["journal_schedule_lag_seconds"].samples] == [{"schedule": "nightly"}]
    by_status: dict[str, float] = {}
    handlers = set()
    for sample in families["journal_invocations"].samples:
        by_status[sample.labels["status"]] = by_status.get(sample.labels["status"], 0) + sample.value
        handlers.add(sample.labels["handler"])
    failed = len(range(0, 10_000, 7))
    assert by_status["failed"] == failed and by_status["pending"] == 10_000 - failed
    assert len(handlers) == MAX_HANDLER_LABELS + 1 and "other" in handlers  # 100 names, the other 50 as one
    depth = {s.labels["handler"]: s.value for s in families["journal_queue_depth"].samples}
    assert sum(depth.values()) == 10_000 - failed
