"""A scrape reads the store's counts, never its records: counted with a store that counts
its reads (not timed), over 10,000 invocations of 150 handlers (past the label bound)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from journal import SetStatus, Status, Transition
from journal.testing import creation_op
from runtime.metrics import MAX_HANDLER_LABELS, Metrics

from ..journal.test_listing_reads import CountingStore


def test_a_scrape_reads_no_record_and_bounds_the_handler_label():
    store = CountingStore()
    for start in range(0, 10_000, 1_000):
        store.apply([creation_op(f"inv-{n:05d}", n, at=1_000_000 + n, handler=f"pkg.mod:h{n % 150:03d}")
                     for n in range(start, start + 1_000)])
    store.apply([SetStatus(f"inv-{n:05d}", Transition(Status.FAILED, 2_000_000)) for n in range(0, 10_000, 7)])
    metrics = Metrics(store)
    store.reads.clear()
    text = metrics.exposition().decode()
    assert store.reads["invocations"] == 0 and store.reads["scanned invocations"] == 0, store.reads
    families = {f.name: f for f in text_string_to_metric_families(text)}
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
