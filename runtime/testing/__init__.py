"""Testing helpers for handlers built on `runtime`: determinism checks and pytest fixtures.

- `check_determinism(handler, input, ...)` runs a handler, crashes it at every journal
  write (and between each step's side effect and its commit), resumes it, and fails with
  the crash point and the first difference if the outcome, the journal or the number of
  step executions changed.
- `determinism_guard()` makes handler code that reads the clock or an unseeded random
  source outside `ctx.run` raise `DeterminismViolation`, naming the `ctx` equivalent.
- `crash_schedules`, `crash_points`, `step_failures`, `promise_timings`: Hypothesis
  strategies for the inputs of `check_determinism` (importing them needs `hypothesis`).
- `replay_journal(handler, store, invocation_id)` checks a recorded journal against the
  current code without running anything (what `journal replay` does).
- `FakeProvider(rpm=, tpm=, period=)`: an OpenAI-compatible model provider on loopback that
  enforces requests and tokens per period with 429s and `x-ratelimit-*` headers, for testing
  a fleet under limits with the real `openai` client.
- The pytest plugin (entry point `journal`) provides the `journal_store` and `engine`
  fixtures.
"""

import typing
from typing import Any

from .._handler._guard import determinism_guard as determinism_guard
from .._handler._replay_journal import replay_journal as replay_journal
from ..errors import DeterminismViolation as DeterminismViolation
from ._check import DeterminismCheckFailed as DeterminismCheckFailed
from ._check import DeterminismReport as DeterminismReport
from ._check import PromiseTiming as PromiseTiming
from ._check import check_determinism as check_determinism
from ._crash import CrashPoint as CrashPoint
from ._crash import Failure as Failure
from ._crash import InjectedFailure as InjectedFailure
from ._crash import Reject as Reject
from ._fake_provider import FakeProvider as FakeProvider

_STRATEGIES = ("crash_points", "crash_schedules", "promise_timings", "step_failures")

if typing.TYPE_CHECKING:  # a type checker sees them as ordinary exports
    from ._strategies import crash_points as crash_points
    from ._strategies import crash_schedules as crash_schedules
    from ._strategies import promise_timings as promise_timings
    from ._strategies import step_failures as step_failures

__all__ = (
    "CrashPoint", "DeterminismCheckFailed", "DeterminismReport", "DeterminismViolation", "Failure",
    "FakeProvider", "InjectedFailure", "PromiseTiming", "Reject",
    "check_determinism", "determinism_guard", "replay_journal",
    *_STRATEGIES,
)


def __getattr__(name: str) -> Any:
    # The strategies import hypothesis, which only tests need: load them on first use.
    if name in _STRATEGIES:
        from . import _strategies

        return getattr(_strategies, name)
    raise AttributeError(f"module 'runtime.testing' has no attribute {name!r}")
