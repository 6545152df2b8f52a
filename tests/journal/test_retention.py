"""Retention's rule on every backend: `trim_due` trims only what is due, a few at a time,
keeps what an unfinished invocation links to, and says what a bad retention is."""

from __future__ import annotations

import pytest

from journal import SetStatus, Status, Transition, parse_retention, trim_due
from journal.testing import acquire, create
from journal.testing._builders import T0

DAY = 86_400_000_000
NOW = T0 + 100 * DAY


def _finish(store, invocation_id, status, at):
    create(store, invocation_id, at=at)
    epoch, _ = acquire(store, invocation_id, now=at)
    store.apply_one(SetStatus(invocation_id, Transition(status, at, release=True), epoch))


def test_trim_due_trims_only_what_is_due_a_few_at_a_time(store):
    for n in range(10):
        _finish(store, f"c-old-{n}", Status.COMPLETED, NOW - 8 * DAY - n)
        _finish(store, f"c-new-{n}", Status.COMPLETED, NOW - 6 * DAY - n)
    _finish(store, "f-old", Status.FAILED, NOW - 8 * DAY)  # failed: kept 30 days
    create(store, "pending-old", at=NOW - 50 * DAY)  # never finished: never trimmed
    policy = parse_retention("completed=7d,failed=30d")
    assert policy == {Status.COMPLETED: 7 * 86400.0, Status.FAILED: 30 * 86400.0}
    first = trim_due(store, policy, now_us=NOW, limit=4)
    assert len(first) == 4 and all(i.startswith("c-old-") for i in first)
    rest = []
    while batch := trim_due(store, policy, now_us=NOW, limit=4):
        rest += batch
    assert sorted(first + rest) == sorted(f"c-old-{n}" for n in range(10))
    assert all(store.get(f"c-new-{n}") is not None for n in range(10))
    assert store.get("f-old") is not None and store.get("pending-old") is not None
    assert {s.handler: s.counts for s in store.summary()} == {"pkg.mod:agent": {"completed": 10, "failed": 1,
                                                                               "pending": 1}}


@pytest.mark.parametrize(("text", "says"), [
    ("completed=7", "not STATUS=AGE"), ("running=1d", "not finished"), ("done=1d", "not a status"), ("", "no retention"),
])
def test_a_bad_retention_says_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=says):
        parse_retention(text)
