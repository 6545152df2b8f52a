"""A small tmpfs for full-disk tests: mounted for the test, unmounted afterwards.

Mounting needs root. Outside CI a machine that cannot mount skips these tests; with
`CI=true` that is a failure, since CI runs as root and must exercise a full disk.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true but a tmpfs cannot be mounted here: {mounted.stderr.strip()}", pytrace=False)
        pytest.skip("cannot mount a small tmpfs here (needs root and mount permission)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
