"""A page comes from the listing index: over 100,000 invocations, a page filtered by status,
handler or key reads only the records it returns (and one more, to know whether a next page
exists), never every record. Counted, not timed: the store's reads of records are counted."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

from journal import MemoryStore, Query, SetStatus, Status, Transition
from journal.testing import creation_op

N = 100_000


class CountingStore(MemoryStore):
    """A memory store that counts the records its read transactions fetch and the index keys they scan."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()

    @contextmanager
    def _read(self):
        with super()._read() as txn:
            counts, get, scan = self.reads, txn.get, txn.scan

            def counted_get(table, key):
                counts[table] += 1
                return get(table, key)

            def counted_scan(table, prefix, start=None):
                for item in scan(table, prefix, start):
                    counts["scanned " + table] += 1
                    yield item

            txn.get, txn.scan = counted_get, counted_scan
            try:
                yield txn
            finally:
                del txn.get, txn.scan


def test_a_filtered_page_over_100000_invocations_reads_only_what_it_returns():
    store = CountingStore()
    for start in range(0, N, 5000):
        ops = [creation_op(f"inv-{n:06d}", n, key=f"k{n % 1000}", at=1_000_000 + n) for n in range(start, start + 5000)]
        store.apply(ops)
    every_tenth = [f"inv-{n:06d}" for n in range(0, N, 10)]
    store.apply([SetStatus(i, Transition(Status.SUSPENDED, 2_000_000, waiting="approval")) for i in every_tenth])

    for query, expected_first in ((Query(statuses=(Status.SUSPENDED,), limit=50), "inv-099990"),
                                  (Query(key="k7", limit=50), "inv-099007"),
                                  (Query(handler="pkg.mod:agent", limit=50), "inv-099999"),
                                  (Query(limit=50), "inv-099999")):
        store.reads.clear()
        found = store.page(query)
        assert len(found.items) == 50 and found.items[0].id == expected_first and found.next is not None
        assert store.reads["invocations"] == 51, (query, store.reads)
        assert store.reads["scanned listing"] <= 51 + 64, (query, store.reads)  # one batch of index keys ahead
        assert store.reads["scanned invocations"] == 0

    # The next page continues where the first ended, at the same cost.
    first = store.page(Query(statuses=(Status.SUSPENDED,), limit=50))
    store.reads.clear()
    second = store.page(Query(statuses=(Status.SUSPENDED,), limit=50, after=first.next))
    assert second.items[0].id == "inv-099490" and all(r.status == Status.SUSPENDED for r in second.items)
    assert store.reads["invocations"] == 51
