"""`journal replay --all` on PostgreSQL without --handler asks, for every invocation, which
code `journal run` started it with here (`cli/_started_here.py::handler_for`), and the
note file gains a line with every `journal run`: one look-up among 10,000 notes."""

from __future__ import annotations

import pytest

GROUP = "noted handler look-up (10,000 notes)"
URL = "postgresql://app@db.internal/jobs"


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    from cli import _started_here

    for i in range(10_000):
        _started_here.note(URL, f"inv-{i}", f"/srv/agents/{i % 7}.py:run")
    return _started_here


@pytest.mark.benchmark(group=GROUP)
def test_handler_for(benchmark, ledger):
    assert benchmark(ledger.handler_for, URL, "inv-5000") == "/srv/agents/2.py:run"
