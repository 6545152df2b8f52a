"""A worker and an invocation started by a handler NAME that the worker has no code for:
the invocation stays pending, and what the worker says is a fix that works."""

import json
import re

from .conftest import target


def test_a_name_without_code_here_stays_pending_and_the_worker_names_the_fix_that_works(sh):
    assert sh("start", "greeter", "--input", '"ann"', "--id", "g1").returncode == 0
    idle = sh("worker", "--until-idle", timeout=120)
    assert idle.returncode == 0, idle.stderr
    [said] = [line for line in idle.stderr.splitlines() if line.startswith("[g1]")]
    assert "--handler greeter=path/to/file.py:function" in said
    assert json.loads(sh("show", "g1", "--json").stdout)["status"] == "pending"
    # The command it names, with the code filled in, runs it.
    fix = re.search(r"journal resume g1 --handler greeter=\S+", said)
    assert fix is not None, said
    argv = fix.group(0).split()[1:]
    argv[-1] = f"greeter={target('greet')}"
    resumed = sh(*argv)
    assert resumed.returncode == 0 and resumed.stdout.strip() == "hello ann", resumed.stderr


def test_a_worker_given_the_code_later_runs_what_an_earlier_one_left(sh):
    assert sh("start", "greeter", "--input", '"bob"', "--id", "g2").returncode == 0
    assert sh("worker", "--until-idle", timeout=120).returncode == 0
    given = sh("worker", "--until-idle", "--handler", f"greeter={target('greet')}", timeout=120)
    assert given.returncode == 0, given.stderr
    assert json.loads(sh("show", "g2", "--json").stdout)["result"] == "hello bob"


def test_resume_of_a_name_without_handler_says_to_give_its_code(sh):
    assert sh("start", "greeter", "--input", '"cy"', "--id", "g3").returncode == 0
    refused = sh("resume", "g3")
    assert refused.returncode == 2
    assert "--handler greeter=path/to/file.py:function" in refused.stderr, refused.stderr
