"""`journal compact` against processes that open the store while it runs.

Compaction copies the data file and renames the copy over it. A process that opened the
store after compaction began would commit into the file being replaced, and its commit
would vanish with it. These tests open that window on purpose (the JOURNAL_TEST_PAUSE
hook holds compaction between the copy and the swap until the test says go) and check
that a run arriving in it is refused, whole, with nothing lost.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from journal import LmdbStore, check, compact

from .conftest import target


def wait_for(path, proc, deadline=30.0):
    """Until `path` exists; fails early if `proc` exits first."""
    end = time.monotonic() + deadline
    while not os.path.exists(path):
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the process exited {proc.returncode} before {path} appeared: {err}")
        assert time.monotonic() < end, f"{path} did not appear within {deadline}s"
        time.sleep(0.005)


@pytest.mark.parametrize("attempt", range(20))
def test_a_run_during_compaction_is_refused_and_nothing_is_lost(journal, sh, db, tmp_path, attempt):
    assert journal("run", target("greet"), "--input", '"before"', "--id", "before").exit_code == 0
    journal("trim", "--older-than", "0")  # free pages, so the copy really differs from the file
    journal("run", target("greet"), "--input", '"kept"', "--id", "kept")
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**sh.env, "JOURNAL_TEST_PAUSE": f"compact:{gate}"}
    compact = subprocess.Popen([sys.executable, "-m", "cli", "compact", "--db", db], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(gate / "compact.reached", compact)  # copied, not yet swapped: the window
        during = sh("run", target("greet"), "--input", '"committed"', "--id", "during")
        listing = journal("ls", "--json")  # this process: a reader is refused as well
    finally:
        (gate / "compact.go").touch()
        out, err = compact.communicate(timeout=60)
    assert compact.returncode == 0, err
    assert during.returncode == 2, during.stderr
    assert "being compacted" in during.stderr and "Traceback" not in during.stderr
    assert listing.exit_code == 2 and "being compacted" in listing.stderr
    # Refused before anything was written; run again after compaction, it lands for good.
    again = journal("run", target("greet"), "--input", '"committed"', "--id", "during")
    assert again.exit_code == 0, again.stderr
    with LmdbStore(db, readonly=True) as store:
        assert check(store) == []
        assert {r.id: r.status.value for r in store.list()} == {"kept": "completed", "during": "completed"}
    assert json.loads(journal("show", "during", "--json").stdout)["result"] == "hello committed"


def test_compact_is_refused_while_another_process_holds_the_store_open(sh, db, tmp_path):
    """A process that opened the store first is found through the open lock, /proc or not."""
    assert sh("run", target("greet"), "--input", '"a"', "--id", "a").returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from journal import LmdbStore; s = LmdbStore(sys.argv[1]); "
         "print('open', flush=True); sys.stdin.read()", db],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "open\n"
        refused = sh("compact", "--force")  # --force skips the /proc scan, never the lock
        assert refused.returncode == 2
        assert "other processes have the store" in refused.stderr and "Traceback" not in refused.stderr
    finally:
        holder.communicate("", timeout=30)
    assert sh("compact").returncode == 0
    assert sh("check").returncode == 0


def test_a_killed_compaction_leaves_no_copy_behind_after_the_next_open(sh, db, tmp_path):
    assert sh("run", target("greet"), "--input", '"a"', "--id", "a").returncode == 0
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**sh.env, "JOURNAL_TEST_PAUSE": f"compact:{gate}"}
    compact = subprocess.Popen([sys.executable, "-m", "cli", "compact", "--db", db], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(gate / "compact.reached", compact)
    compact.kill()
    compact.communicate(timeout=30)
    assert os.path.isdir(os.path.join(db, "compact.tmp"))
    assert sh("run", target("greet"), "--input", '"b"', "--id", "b").returncode == 0
    assert not os.path.exists(os.path.join(db, "compact.tmp"))
    assert sh("check").returncode == 0



def test_processes_opening_the_store_while_the_compacting_one_still_has_it_open_see_everything(journal, sh, db):
    """LMDB's lock file names the meta page readers use; after the swap it must describe the
    new file before another process opens it, or that process reads an empty store and its
    next commit overwrites the compacted data."""
    for i in range(20):
        assert journal("run", target("greet"), "--input", f'"{i}"', "--id", f"i{i}").exit_code == 0
    journal("trim", "--older-than", "0", "--status", "completed", "--keep-record")
    with LmdbStore(db) as store:
        compact(store)
        listed = sh("ls", "--json")
        assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 20
        assert sh("run", target("greet"), "--input", '"after"', "--id", "after").returncode == 0
        assert len(store.list()) == 21 and check(store) == []
    assert len(json.loads(sh("ls", "--json").stdout)) == 21
    assert sh("check").returncode == 0
