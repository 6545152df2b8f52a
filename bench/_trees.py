"""Running one sample of a paired benchmark in a fresh process of a given checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_in_tree(tree: str, script: str, *args: str) -> dict:
    """`python SCRIPT ARGS` with `tree` first on its PYTHONPATH; the JSON object it prints.
    The object must carry `runtime` (the imported `runtime.__file__`), checked to come from `tree`."""
    env = dict(os.environ, PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, script, *args], env=env, check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    assert got["runtime"].startswith(tree + os.sep), (got["runtime"], tree)  # the checkout asked for
    return dict(got)
