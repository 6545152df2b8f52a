"""Generated handler programs survive a crash at every journal write with the same outcome and journal."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, note

from runtime.testing import check_determinism

from .programs import Scenario, run_program, scenarios

STATS = {"programs": 0, "crash_points": 0, "schedules": 0, "crashes": 0, "seconds": 0.0}


@pytest.mark.timeout(1800)  # 276 s measured on two cores shared with seven other suites (the default is 600)
@given(scenarios())
def test_generated_programs_are_crash_safe_and_deterministic(scenario: Scenario):
    note(repr(scenario))
    started = time.perf_counter()
    report = check_determinism(run_program, scenario.program, **scenario.check_kwargs())
    note(str(report))
    STATS["programs"] += 1
    STATS["crash_points"] += report.crash_points
    STATS["schedules"] += report.schedules
    STATS["crashes"] += report.crashes
    STATS["seconds"] += time.perf_counter() - started


def teardown_module():
    if STATS["programs"]:
        print(f"\ngenerated programs: {STATS}")
