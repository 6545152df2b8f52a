"""`journal tail -f ID` started before the invocation (`journal run ... & journal tail -f ID`)
waits for the store to be created and for the id to appear, then follows it to its end;
without -f an unknown id is still an error at once."""

from __future__ import annotations

import os

from ..waiting import Lines
from .conftest import target


def _follow(sh, invocation_id: str):
    tail = sh.popen("tail", invocation_id, "-f")
    return tail, Lines(tail.stdout), Lines(tail.stderr)


def test_tail_f_waits_for_the_store_to_be_created(sh, db):
    assert not os.path.exists(db)
    tail, out, err = _follow(sh, "late-1")
    err.wait_for("waiting for the store")
    assert tail.poll() is None
    ran = sh("run", target("greet"), "--input", '"ada"', "--id", "late-1")
    assert ran.returncode == 0, ran.stderr
    assert tail.wait(timeout=60) == 0, err.text()
    text = out.text()
    assert " started " in text and " completed " in text, text


def test_tail_f_waits_for_the_id_to_appear_and_takes_a_prefix(sh):
    assert sh("run", target("greet"), "--input", '"x"', "--id", "before").returncode == 0
    tail, out, err = _follow(sh, "late-2")
    err.wait_for("waiting for invocation late-2")
    ran = sh("run", target("greet"), "--input", '"ada"', "--id", "late-2-and-more")
    assert ran.returncode == 0, ran.stderr
    assert tail.wait(timeout=60) == 0, err.text()
    assert "hello ada" in out.text()


def test_tail_without_f_does_not_wait(sh):
    assert sh("tail", "nobody").returncode == 2  # no store
    assert sh("run", target("greet"), "--input", '"x"', "--id", "there").returncode == 0
    missing = sh("tail", "nobody")
    assert missing.returncode == 2 and "no invocation 'nobody'" in missing.stderr
