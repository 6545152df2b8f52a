"""A handler filter finds a TARGET by what the listings show (`ops.py:slow`) or by a relative
path, not only by the absolute path it was recorded with; a NAME is matched whole. On every
backend, through the listing index."""

from __future__ import annotations

import msgspec
import pytest

from journal import Query
from journal._listing import handler_matches
from journal.testing import creation_op

RECORDED = {
    "a": "/srv/app/examples/ops.py:slow",
    "b": "/srv/app/other/ops.py:slow",
    "c": "/srv/app/examples/ops.py:fast",
    "d": "/srv/app/examples/hops.py:slow",
    "e": "pkg.ops:slow",
    "f": "slow",
}


@pytest.fixture
def listed(store):
    for n, (invocation_id, handler) in enumerate(RECORDED.items()):
        op = creation_op(invocation_id, n, at=1_000_000 + n)
        record = msgspec.structs.replace(op.record, handler=handler)
        store.apply([msgspec.structs.replace(op, record=record)])
    return lambda handler: sorted(item.id for item in store.page(Query(handler=handler)).items)


@pytest.mark.parametrize(("wanted", "found"), [
    ("ops.py:slow", ["a", "b"]),
    ("examples/ops.py:slow", ["a"]),
    ("./examples/ops.py:slow", ["a"]),
    ("/srv/app/examples/ops.py:slow", ["a"]),
    ("app/examples/ops.py:fast", ["c"]),
    ("s.py:slow", []),
    ("/app/examples/ops.py:slow", []),
    ("ops:slow", ["e"]),
    ("pkg.ops:slow", ["e"]),
    ("slow", ["f"]),
    ("ops.py", []),
])
def test_a_handler_filter_matches_the_shown_form_and_relative_targets(listed, wanted, found):
    assert listed(wanted) == found


def test_the_filter_rule_is_whole_path_components():
    assert handler_matches("ops.py:slow", "/x/ops.py:slow")
    assert not handler_matches("ops.py:slow", "/x/ops.py:slower")
    assert not handler_matches("ps.py:slow", "/x/ops.py:slow")
    assert not handler_matches(":slow", "/x/ops.py:slow")
