"""The path of one live step stays short (issue: the hot path written once): the files a
`ctx.run` on LMDB at `sync` durability enters, and no call from storage back into a file up
its stack. `python -m bench.step_path --list` prints the path itself."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_live_step_on_lmdb_enters_at_most_eleven_files_and_storage_never_calls_back():
    # In a fresh interpreter: an observer or metrics registered by another test in this
    # process would put its own files on the path.
    script = ("import json; from bench.step_path import trace_one_step; "
              "calls, callbacks = trace_one_step('sync'); "
              "print(json.dumps({'files': sorted({p for p, _ in calls}), 'callbacks': callbacks}))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    traced = json.loads(done.stdout)
    assert len(traced["files"]) <= 11, " ".join(traced["files"])
    assert traced["callbacks"] == [], traced["callbacks"]
