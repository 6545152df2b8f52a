"""Fixtures for the pytest-benchmark suites, and a summary of ratios against raw LMDB.

Run with `.venv/bin/python -m pytest bench/ --benchmark-only` (the main test run never
collects this directory). Each benchmark group has one raw-LMDB baseline measured in
the same session; the summary at the end prints every member of a group per operation
and as a ratio to that baseline.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from journal import LmdbStore

from ._raw import RawLmdb

# (group, name, ops per round, median seconds per round, is the group's baseline)
_RESULTS: list[tuple[str, str, int, float, bool]] = []


@pytest.fixture(scope="session")
def portal() -> Iterator[BlockingPortal]:
    """One event loop for the whole session, in its own thread.

    Each round is one `portal.call(...)`; the raw baselines go through the portal too, so
    the cost of reaching the loop (a few tens of microseconds per round, spread over
    hundreds of operations) falls on both sides of a ratio.
    """
    with start_blocking_portal("asyncio") as portal:
        yield portal


@pytest.fixture
def raw(tmp_path) -> Iterator[RawLmdb]:
    """A bare LMDB environment with the journal's flags, on the same disk as `store`."""
    with RawLmdb(str(tmp_path)) as env:
        yield env


@pytest.fixture
def store(tmp_path) -> Iterator[LmdbStore]:
    with LmdbStore(tmp_path / "store") as opened:
        yield opened


@pytest.fixture
def report(request: pytest.FixtureRequest):
    """`report(benchmark, ops, baseline=False)` after a benchmark: note its per-operation cost."""

    def note(benchmark, ops: int, *, baseline: bool = False) -> None:
        benchmark.extra_info["ops_per_round"] = ops
        if benchmark.stats is None:  # --benchmark-disable
            return
        median = benchmark.stats.stats.median
        benchmark.extra_info["us_per_op"] = median / ops * 1e6
        benchmark.extra_info["ops_per_s"] = ops / median
        group = benchmark.group or request.node.module.__name__
        _RESULTS.append((group, request.node.name, ops, median, baseline))

    return note


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _RESULTS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("per operation, against the raw LMDB baseline of each group (same run)")
    groups: dict[str, list[tuple[str, int, float, bool]]] = {}
    for group, name, ops, median, baseline in _RESULTS:
        groups.setdefault(group, []).append((name, ops, median, baseline))
    for group, members in groups.items():
        base = next((m for m in members if m[3]), None)
        write(f"{group}:")
        for name, ops, median, baseline in members:
            per_op = median / ops * 1e6
            rate = ops / median
            text = f"  {name:55s} {per_op:10.2f} us/op {rate:14,.0f} ops/s"
            if base is not None and not baseline:
                base_per_op = base[2] / base[1] * 1e6
                text += f"   {per_op / base_per_op:6.2f}x raw time, {base_per_op / per_op * 100:6.1f}% raw rate"
            elif baseline:
                text += "   (baseline)"
            write(text)
