"""Hypothesis strategies for the inputs of `check_determinism`.

    from hypothesis import given
    from runtime.testing import check_determinism, crash_schedules, step_failures

    @given(schedule=crash_schedules(), failures=step_failures(["search", "answer"]))
    def test_agent_survives_crashes(schedule, failures):
        check_determinism(agent, "question", schedules=[schedule], failures=failures, single_crashes=False)

Every strategy shrinks towards the simple case (fewer crashes, earlier writes, no failures,
promises resolved when awaited), so a failing example is reported in its smallest form.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from hypothesis import strategies as st

from ._check import PromiseTiming
from ._crash import CrashPoint, Failure


def crash_points(max_write: int = 20) -> st.SearchStrategy[CrashPoint]:
    """One crash: at journal write 1..`max_write`, before or after it."""
    return st.builds(CrashPoint, st.integers(1, max_write), st.booleans())


def crash_schedules(max_crashes: int = 3, max_write: int = 20) -> st.SearchStrategy[list[CrashPoint]]:
    """Crashes in a row: each counts its journal write from the previous crash.

    Points beyond the end of a run are simply not reached, so `max_write` may exceed the
    number of writes a handler makes.
    """
    return st.lists(crash_points(max_write), max_size=max_crashes)


def step_failures(names: Iterable[str], *, max_times: int = 3, terminal: bool = True,
                  ) -> st.SearchStrategy[dict[str, Failure]]:
    """Failures to inject by step name: transient ones (retried) and, with `terminal`, `TerminalError`."""
    names = sorted(set(names))
    kinds = st.builds(Failure, times=st.integers(1, max_times))
    if terminal:
        kinds = kinds | st.builds(Failure, terminal=st.just(True))
    if not names:
        return st.just({})
    return st.dictionaries(st.sampled_from(names), kinds, max_size=len(names))


def promise_timings(names: Iterable[str], *, max_write: int = 20) -> st.SearchStrategy[dict[str, PromiseTiming]]:
    """When each promise is resolved: when awaited, before the start, or after a given journal write."""
    when: list[Literal["waiting", "start"]] = ["waiting", "start"]
    timing: st.SearchStrategy[PromiseTiming] = st.sampled_from(when) | st.integers(1, max_write)
    return st.fixed_dictionaries({name: timing for name in sorted(set(names))})
