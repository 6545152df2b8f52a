"""What the command line says about a typed promise, on `examples/approval.py`: the suspend
message names the type without a wrong article, and a refused value names the field at
fault, also when the type is a union (`Decision | bool`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

APPROVAL = Path(__file__).resolve().parents[2] / "examples" / "approval.py"
REQUEST = {"order": "A-1001", "amount": 42.5, "reason": "arrived broken"}


@pytest.fixture
def waiting(sh):
    done = sh("run", f"{APPROVAL}:refund", "--id", "refund-1", "--input", json.dumps(REQUEST))
    assert done.returncode == 3, done.stderr
    return done.stderr


def test_the_suspend_message_names_the_type_it_expects(waiting, sh):
    assert "Deliver a value of type approval.py:Decision | bool (for example" in waiting, waiting
    shown = sh("show", "refund-1")
    assert "it expects a value of type approval.py:Decision | bool for 'approval'" in shown.stdout, shown.stdout


@pytest.mark.parametrize(("value", "fault"), [
    ('{"approved": "yes", "by": "dana"}', 'value.approved: expected boolean, got string "yes"'),
    ('{"by": "dana"}', "value: the field 'approved' is missing"),
    ('{"approved": true, "by": 7}', "value.by: expected string, got integer 7"),
])
def test_a_refused_value_names_the_field_at_fault(waiting, sh, value, fault):
    refused = sh("resolve", "refund-1", "approval", value)
    assert refused.returncode == 2, refused.stderr
    assert fault in refused.stderr, refused.stderr
    assert "resolve it with a value of type approval.py:Decision | bool" in refused.stderr
    assert json.loads(sh("show", "refund-1", "--json").stdout)["status"] == "suspended"
