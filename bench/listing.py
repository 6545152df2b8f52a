"""`python -m bench.listing [N] [--postgres]`: a filtered page of 50 among N invocations
(default 100,000), served from the listing index (`Store.page`) and, as a floor measured in
the same run, the way `GET /invocations` paged before it: every record read, filtered and
sorted. Prints the median of each over 30 pages, in ms."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

from journal import LmdbStore, Query, SetStatus, Status, Store, Transition
from journal.testing import creation_op


def _fill(store: Store, n: int) -> None:
    for start in range(0, n, 5000):
        store.apply([creation_op(f"inv-{i:07d}", i, key=f"k{i % 1000}", at=1_000_000 + i)
                     for i in range(start, min(n, start + 5000))])
    store.apply([SetStatus(f"inv-{i:07d}", Transition(Status.SUSPENDED, 2_000_000, waiting="approval"))
                 for i in range(0, n, 10)])


def _median_ms(fn, rounds: int = 30) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def _before(store: Store) -> list[str]:
    records = sorted(store.list(Status.SUSPENDED), key=lambda r: (r.created_at, r.id), reverse=True)
    return [r.id for r in records[:50]]


def run(store: Store, n: int) -> None:
    _fill(store, n)
    query = Query(statuses=(Status.SUSPENDED,), limit=50)
    assert [r.id for r in store.page(query).items] == _before(store)
    indexed = _median_ms(lambda: store.page(query))
    keyed = _median_ms(lambda: store.page(Query(key="k7", limit=50)))
    scanned = _median_ms(lambda: _before(store), rounds=5)
    print(f"{type(store).__name__}, {n:,} invocations, a page of 50 suspended ones: {indexed:.2f} ms from the index "
          f"(by key: {keyed:.2f} ms), {scanned:.1f} ms reading every suspended record ({scanned / indexed:.0f}x)")


def main() -> None:
    n = int(next((a for a in sys.argv[1:] if a.isdigit()), 100_000))
    if "--postgres" in sys.argv:
        from journal import PostgresStore

        from .pgserver import PgServer

        server = PgServer().start()
        try:
            with PostgresStore(server.new_database()) as store:
                run(store, n)
        finally:
            server.stop()
        return
    with tempfile.TemporaryDirectory(prefix="journal-listing-bench-") as tmp, LmdbStore(tmp + "/db") as store:
        run(store, n)


if __name__ == "__main__":
    main()
