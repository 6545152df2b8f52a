"""`journal cancel` from one process reaches an invocation that another process is running:
the running engine's lease watcher passes the request on (runtime/_engine/_leases.py)."""

import json
import os
import signal
import subprocess

from ..waiting import DEADLINE, wait_while_alive
from .conftest import target


def test_a_cancel_from_another_process_wakes_a_sleep_in_the_running_one(sh, log, tmp_path):
    runner = subprocess.Popen(sh.argv("run", target("sleeps_inline"), "--input", json.dumps({"log": log.path}),
                                      "--id", "s1", "--json"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=sh.env)
    try:
        wait_while_alive(runner, lambda: log.lines() == ["started"], "the handler to start its sleep")
        cancelled = sh("cancel", "s1", timeout=DEADLINE)  # another process: waits until it is cancelled
        assert cancelled.returncode == 0, cancelled.stderr
        out, err = runner.communicate(timeout=DEADLINE)  # long before the 50 s sleep would end
    finally:
        if runner.poll() is None:
            os.kill(runner.pid, signal.SIGKILL)
            runner.wait()
    assert json.loads(out)["status"] == "cancelled", err
    assert json.loads(sh("show", "s1", "--json").stdout)["status"] == "cancelled"
    assert log.lines() == ["started"]
