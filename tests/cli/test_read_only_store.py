"""A store on a read-only mount: the reading commands work (LMDB opened read-only, without
the lock file's write path), and the commands that write are refused with what to do."""

import json
import os
import subprocess

import pytest

from .conftest import target


def _cannot(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def read_only(sh, db, tmp_path, log):
    """The test's store, with a finished and a suspended invocation, bind-mounted read-only."""
    assert sh("run", target("greet"), "--input", '"ann"', "--id", "done").returncode == 0
    assert sh("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}),
              "--id", "waits").returncode == 3
    mount = tmp_path / "read-only-store"
    mount.mkdir()
    bound = subprocess.run(["mount", "--bind", db, str(mount)], capture_output=True, text=True)
    if bound.returncode != 0:
        _cannot(f"cannot bind-mount a directory here (needs root): {bound.stderr.strip()}")
    try:
        remounted = subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], capture_output=True, text=True)
        if remounted.returncode != 0:
            _cannot(f"cannot remount read-only: {remounted.stderr.strip()}")
        assert os.statvfs(mount).f_flag & os.ST_RDONLY
        yield str(mount)
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_reading_commands_work_on_a_read_only_store(sh, read_only):
    listed = sh("ls", "--json", "--db", read_only, use_db=False)
    assert listed.returncode == 0, listed.stderr
    assert {r["id"]: r["status"] for r in json.loads(listed.stdout)} == {"done": "completed", "waits": "suspended"}
    shown = sh("show", "done", "--db", read_only, use_db=False)
    assert shown.returncode == 0 and "hello ann" in shown.stdout, shown.stderr
    checked = sh("check", "--db", read_only, use_db=False)
    assert checked.returncode == 0 and "no problems" in checked.stderr, checked.stdout + checked.stderr
    exported = sh("export", "done", "--format", "jsonl", "--db", read_only, use_db=False)
    assert exported.returncode == 0, exported.stderr
    assert [json.loads(line)["kind"] for line in exported.stdout.splitlines()] == ["started", "step", "completed"]
    tailed = sh("tail", "waits", "--db", read_only, use_db=False)
    assert tailed.returncode == 0 and " step " in tailed.stdout, tailed.stderr


def test_writing_commands_are_refused_cleanly_on_a_read_only_store(sh, read_only):
    for argv in (["resolve", "waits", "approval", "true"], ["run", target("greet"), "--input", '"bob"'],
                 ["cancel", "waits"]):
        refused = sh(*argv, "--db", read_only, use_db=False)
        assert refused.returncode == 2, (argv, refused.stderr)
        assert "read-only file system" in refused.stderr and "Traceback" not in refused.stderr
    listed = sh("ls", "--json", "--db", read_only, use_db=False)
    assert json.loads(listed.stdout)[1]["status"] == "suspended"  # nothing changed
