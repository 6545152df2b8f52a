"""Hypothesis profiles for the property suites, chosen with HYPOTHESIS_PROFILE.

- `ci` (the default): the whole of tests/property in about a minute and a half.
- `thorough`: many more examples, for long local runs
  (`HYPOTHESIS_PROFILE=thorough pytest tests/property`).
- `quick`: a handful of examples, while editing.

Hypothesis prints the seed and the `@reproduce_failure` blob of a failing example.
"""

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(
    deadline=None,  # examples run whole scenarios; their duration varies with the machine
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)

settings.register_profile("ci", max_examples=300, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)
settings.register_profile("quick", max_examples=10, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
