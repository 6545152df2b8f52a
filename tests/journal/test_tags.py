"""Tags at scale, and the summary's cost: 10,000 invocations over 100 tags, listed by tag
page by page on every backend; the summary reads counts, never a record."""

from __future__ import annotations

from journal import Query, SetStatus, Status, Transition
from journal.testing import creation_op

from .test_listing_reads import CountingStore

N, TAGS, BATCH = 10_000, 100, 1_000


def _tagged(n: int) -> dict[str, str]:
    # Every invocation has a customer (one of 100); every third also a region, so that two
    # tags narrow a page further than either.
    return {"customer": f"c{n % TAGS:03d}", **({"region": "eu"} if n % 3 == 0 else {})}


def test_ls_by_tag_over_10000_invocations_returns_exactly_the_tagged_ones_page_by_page(store):
    for start in range(0, N, BATCH):  # a thousand creations a transaction
        results = store.apply([creation_op(f"inv-{n:05d}", n, at=1_000_000 + n, tags=_tagged(n))
                               for n in range(start, start + BATCH)])
        assert not [r for r in results if isinstance(r, BaseException)]
    for tags, expected in (
        ((("customer", "c007"),), [n for n in range(N) if n % TAGS == 7]),
        ((("customer", "c042"), ("region", "eu")), [n for n in range(N) if n % TAGS == 42 and n % 3 == 0]),
        ((("customer", "c999"),), []),
    ):
        seen, query, pages = [], Query(tags=tags, limit=30), 0
        while True:
            found = store.page(query)
            assert len(found.items) <= 30
            seen += [r.id for r in found.items]
            pages += 1
            if found.next is None:
                break
            query = Query(tags=tags, limit=30, after=found.next)
        assert seen == [f"inv-{n:05d}" for n in reversed(expected)]
        assert pages == max(1, -(-len(expected) // 30))
    # A tag and a status together: the status is checked on the records the tag leads to.
    store.apply([SetStatus(f"inv-{n:05d}", Transition(Status.CANCELLED, 2_000_000)) for n in range(7, 1000, 100)])
    found = store.page(Query(tags=(("customer", "c007"),), statuses=(Status.CANCELLED,), limit=100))
    assert [r.id for r in found.items] == [f"inv-{n:05d}" for n in range(907, 0, -100)]


def test_the_summary_reads_counts_never_a_record():
    store = CountingStore()
    for start in range(0, N, BATCH):
        store.apply([creation_op(f"inv-{n:05d}", n, at=1_000_000 + n, handler=f"pkg.mod:h{n % 5}")
                     for n in range(start, start + BATCH)])
    store.apply([SetStatus(f"inv-{n:05d}", Transition(Status.FAILED, 2_000_000)) for n in range(0, N, 10)])
    store.reads.clear()
    summary = store.summary()
    assert {s.handler: s.counts for s in summary} == {
        f"pkg.mod:h{h}": {"pending": 1000, "failed": 1000} if h == 0 else {"pending": 2000} for h in range(5)}
    # (h0's oldest, inv-00000, failed with every tenth: its oldest runnable is inv-00005)
    assert {s.handler: s.oldest_runnable_at for s in summary} == {
        "pkg.mod:h0": 1_000_005, "pkg.mod:h1": 1_000_001, "pkg.mod:h2": 1_000_002, "pkg.mod:h3": 1_000_003,
        "pkg.mod:h4": 1_000_004}
    assert store.reads["invocations"] == 0 and store.reads["scanned invocations"] == 0
    # The counts (two of h0, one of each other handler) and one runnable key per handler.
    assert store.reads["scanned listing"] <= 6 + 5 * 64, store.reads
