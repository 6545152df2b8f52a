"""The disk holding the store fills up (a real, small tmpfs): `journal run` says what happened
and what to do, and a worker waits for room and goes on by itself once there is some."""

import json
import signal
import subprocess

import pytest

from ..tmpfs import small_tmpfs
from ..waiting import Lines, wait_until

FILL = (
    "from runtime import Context\n"
    "async def fill(ctx: Context, n: int) -> int:\n"
    "    for i in range(n):\n"
    "        await ctx.run(f's{i}', lambda: 'y' * 100_000)\n"
    "    return n\n"
)
STEPS = 50  # 5 MB of results: more than is left beside the ballast, less than the disk


@pytest.fixture
def small_disk(tmp_path):
    """A 10 MB tmpfs holding a 7 MB ballast file (`ballast.unlink()` makes room) and the store."""
    with small_tmpfs(tmp_path / "small-disk", "10m") as disk:
        ballast = disk / "ballast"
        ballast.write_bytes(b"\1" * (7 * 1024 * 1024))
        (tmp_path / "fill.py").write_text(FILL)
        yield str(disk / "db"), ballast, f"{tmp_path / 'fill.py'}:fill"


def _status(sh, db: str, invocation_id: str) -> str:
    return json.loads(sh("show", invocation_id, "--json", "--db", db, use_db=False).stdout)["status"]


def test_run_on_a_full_disk_says_to_free_space_then_resume(sh, small_disk):
    db, ballast, fill = small_disk
    done = sh("run", fill, "--input", str(STEPS), "--id", "full", "--db", db, use_db=False, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "is full: invocation full stopped before its next entry was journaled" in done.stderr
    assert "(the handler did not fail)" in done.stderr and "Traceback" not in done.stderr
    assert f"journal resume full --db {db}" in done.stderr
    assert "[Errno" not in done.stderr
    # Given back if the disk took that write too; else its owner is seen gone at once.
    assert _status(sh, db, "full") in ("pending", "running")
    ballast.unlink()  # what it said to do: free some space, then resume
    resumed = sh("resume", "full", "--db", db, use_db=False, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == str(STEPS)


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_worker_or_server_waits_for_room_and_goes_on(sh, small_disk, command):
    # `serve` keeps answering meanwhile; both pause their workers, say so once, and go on.
    db, ballast, fill = small_disk
    assert sh("start", "fill", "--input", str(STEPS), "--id", "w", "--db", db, use_db=False).returncode == 0
    given = ["--handler", f"fill={fill}"] + (["--http", "127.0.0.1:0"] if command == "serve" else [])
    process = subprocess.Popen(sh.argv(command, "-q", *given)[:-2] + ["--db", db], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=sh.env)
    try:
        err = Lines(process.stderr)
        paused = err.wait_for("paused: the disk holding")
        assert "tries again every few seconds" in paused
        assert process.poll() is None and _status(sh, db, "w") in ("pending", "running")
        ballast.unlink()
        err.wait_for("going on")
        wait_until(lambda: _status(sh, db, "w") == "completed", f"the {command} to finish the invocation")
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        said = err.text()
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    assert process.returncode == 0, said
    assert said.count("paused:") == 1 and "Traceback" not in said, said


def test_a_worker_until_idle_gives_up_on_a_full_disk_after_its_bound(sh, small_disk):
    # A script or cron job must not hang: --until-idle waits --disk-full-wait seconds (60 by
    # default) for room, then exits 1 saying what happened and what to do.
    db, ballast, fill = small_disk
    assert sh("start", "fill", "--input", str(STEPS), "--id", "w", "--db", db, use_db=False).returncode == 0
    argv = sh.argv("worker", "--until-idle", "--disk-full-wait", "1", "-q", "--handler", f"fill={fill}")[:-2]
    done = subprocess.run(argv + ["--db", db], capture_output=True, text=True, env=sh.env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "paused: the disk holding" in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the disk holding") and "is full" in last, done.stderr
    assert "Free some space" in last and "waited 1 s for room, then gave up" in last
    assert "run this worker again" in last and "Traceback" not in done.stderr
    assert _status(sh, db, "w") in ("pending", "running")
    ballast.unlink()  # what it said to do
    again = subprocess.run(argv + ["--db", db], capture_output=True, text=True, env=sh.env, timeout=120)
    assert again.returncode == 0, again.stderr
    assert _status(sh, db, "w") == "completed"


def test_disk_full_wait_is_refused_without_until_idle(sh):
    refused = sh("worker", "--disk-full-wait", "5")
    assert refused.returncode == 2 and "--until-idle" in refused.stderr
