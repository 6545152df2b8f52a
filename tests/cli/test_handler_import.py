"""A handler's module that raises on import, and a handler file that moved: every command
that loads the handler (`run`, `resume`, `worker`) says so in one line, the same line, and
a moved file's message says how to name the new place."""

from __future__ import annotations

import shutil

import pytest

HANDLER = '''
from runtime import Context

async def wait(ctx: Context) -> str:
    decision = await ctx.promise("go")
    return f"went {decision}"
'''
RAISES = "import os\nSETTING = os.environ['NO_SUCH_SETTING_ANYWHERE']\n" + HANDLER


@pytest.fixture
def waiting(tmp_path, sh):
    """An invocation suspended in `wait`, started from tmp/agents/ops.py."""
    (tmp_path / "agents").mkdir()
    path = tmp_path / "agents" / "ops.py"
    path.write_text(HANDLER)
    done = sh("run", f"{path}:wait", "--id", "w-1")
    assert done.returncode == 3, done.stderr
    assert sh("resolve", "w-1", "go", '"north"').returncode == 0
    return path


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_module_that_raises_on_import_is_one_line_the_same_from_run_and_resume(waiting, sh):
    waiting.write_text(RAISES)
    ran = sh("run", f"{waiting}:wait", "--id", "w-2")
    resumed = sh("resume", "w-1")
    assert ran.returncode == resumed.returncode == 2, (ran.stderr, resumed.stderr)
    message = _one_line(resumed.stderr)
    assert message == _one_line(ran.stderr)
    assert "importing it raised KeyError: 'NO_SUCH_SETTING_ANYWHERE' (at ops.py:2)" in message, message
    assert sh("show", "w-1", "--json").returncode == 0  # untouched: still waits for its resume
    worked = sh("worker", "--until-idle")
    assert "importing it raised KeyError" in worked.stderr and "Traceback" not in worked.stderr, worked.stderr


def test_a_moved_handler_file_names_the_option_that_runs_it_from_its_new_place(waiting, sh, tmp_path):
    moved = tmp_path / "ops_v2.py"
    shutil.move(waiting, moved)
    resumed = sh("resume", "w-1")
    assert resumed.returncode == 2, resumed.stderr
    message = _one_line(resumed.stderr)
    assert "does not exist" in message and "--handler NEWPATH.py:wait" in message, message
    again = sh("resume", "w-1", "--handler", f"{moved}:wait")
    assert again.returncode == 0, again.stderr
    assert "went north" in again.stdout
