"""Ids as a user types them: `journal ls` prints every id whole (piped, at 80 columns), and
every command that takes an invocation id takes a unique prefix of one, refusing an
ambiguous prefix with the ids it starts."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from .conftest import target

# Long enough that a table of 80 columns cannot hold the id beside the other columns.
WAITING = "order-2026-12-03-customer-4711-refund-approval-a1b2c3"
DONE = "order-2026-12-03-customer-4711-refund-approval-z9y8x7"


@pytest.fixture
def two(sh, log):
    waiting = sh("run", target("approval"), "--id", WAITING, "--input", json.dumps({"log": log.path, "topic": "t"}))
    assert waiting.returncode == 3, waiting.stderr
    done = sh("run", target("greet"), "--id", DONE, "--input", '"ada"')
    assert done.returncode == 0, done.stderr


def _piped(sh, *args: str, columns: str = "80") -> subprocess.CompletedProcess[str]:
    env = {**sh.env, "COLUMNS": columns}
    return subprocess.run(sh.argv(*args), capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("columns", ["80", "40"])
def test_ls_never_cuts_an_id(two, sh, columns):
    listed = _piped(sh, "ls", columns=columns)
    assert listed.returncode == 0, listed.stderr
    ids = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert ids == [WAITING, DONE], listed.stdout


def test_a_unique_prefix_names_the_invocation_for_reading_commands(two, sh):
    shown = sh("show", "order-2026-12-03-customer-4711-refund-approval-z", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == DONE
    tailed = sh("tail", "order-2026-12-03-customer-4711-refund-approval-z")
    assert tailed.returncode == 0 and "completed" in tailed.stdout, tailed.stderr
    exported = sh("export", "order-2026-12-03-customer-4711-refund-approval-z")
    assert exported.returncode == 0 and json.loads(exported.stdout)["id"] == DONE
    replayed = sh("replay", "order-2026-12-03-customer-4711-refund-approval-z", "--json")
    assert replayed.returncode == 0 and json.loads(replayed.stdout)[0]["id"] == DONE, replayed.stderr


def test_a_unique_prefix_names_the_invocation_for_commands_that_act(two, sh, log):
    prefix = "order-2026-12-03-customer-4711-refund-approval-a"
    resolved = sh("resolve", prefix, "approval", '{"approved": true, "by": "dana"}', "--json")
    assert resolved.returncode == 0, resolved.stderr
    assert json.loads(resolved.stdout)["id"] == WAITING
    resumed = sh("resume", prefix, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["id"] == WAITING and json.loads(resumed.stdout)["status"] == "completed"
    forked = sh("fork", prefix, "--at", "2", "--new-id", "the-fork", "--json")
    assert forked.returncode == 0, forked.stderr
    assert json.loads(forked.stdout)["parent"] == WAITING
    cancelled = sh("cancel", "the-f")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(sh("show", "the-fork", "--json").stdout)["status"] == "cancelled"


@pytest.mark.parametrize("command", [["show"], ["tail"], ["export"], ["resume"], ["cancel"],
                                     ["resolve", "approval", "true"], ["fork", "--at", "1"], ["retry"], ["replay"]])
def test_an_ambiguous_prefix_is_refused_listing_the_ids_it_starts(two, sh, command):
    name, *rest = command
    refused = sh(name, "order-2026", *rest)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert WAITING in refused.stderr and DONE in refused.stderr and "Traceback" not in refused.stderr
    assert "give more of the id" in refused.stderr
    assert sorted(os.listdir(os.path.dirname(sh.argv()[-1]))) == ["db", "effects.log"]  # nothing created beside


def test_an_id_that_starts_another_is_that_id(sh):
    for name in ("job", "job-retry-1"):
        assert sh("run", target("greet"), "--id", name, "--input", '"x"').returncode == 0
    shown = sh("show", "job", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == "job"


def test_a_prefix_of_nothing_says_so(sh, two):
    missing = sh("show", "nothing-like-it")
    assert missing.returncode == 2 and "no invocation 'nothing-like-it'" in missing.stderr
