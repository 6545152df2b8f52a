"""trim, compact, check and export."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from journal import (
    Completed,
    LmdbStore,
    SetStatus,
    Status,
    Transition,
    check,
    compact,
    encode_entry,
    encode_value,
    export,
    trim,
)

from .helpers import T0, acquire, append, create, step

DAY = 86_400_000_000


def _finish(store, invocation_id, status=Status.COMPLETED, at=T0):
    epoch, _ = acquire(store, invocation_id, now=at)
    entry = encode_entry(Completed(at, encode_value("ok")))
    append(store, invocation_id, epoch, (1, step()), (2, entry),
           transition=Transition(status, at, result=encode_value("ok"), release=True))


def test_trim_removes_only_finished_journals_older_than_the_cutoff(store):
    create(store, "old-done")
    _finish(store, "old-done", at=T0)
    create(store, "new-done")
    _finish(store, "new-done", at=T0 + 9 * DAY)
    create(store, "old-pending")
    removed = trim(store, older_than_s=7 * 86_400, now_us=T0 + 10 * DAY)
    assert [r.id for r in removed] == ["old-done"]
    assert store.get("old-done") is None
    assert store.get("new-done") is not None and store.get("old-pending") is not None


def test_trim_dry_run_changes_nothing(store):
    create(store, "a")
    _finish(store, "a")
    assert [r.id for r in trim(store, dry_run=True, now_us=T0 + DAY)] == ["a"]
    assert store.entry_count("a") == 3


def test_trim_can_keep_the_result_record(store):
    create(store, "a")
    _finish(store, "a")
    trim(store, keep_record=True, now_us=T0 + DAY)
    assert store.get("a").status == Status.COMPLETED and store.entries("a") == []
    assert check(store) == []


def test_trim_refuses_unfinished_statuses(store):
    with pytest.raises(ValueError, match="only finished"):
        trim(store, statuses=["running"])


def test_check_passes_a_healthy_store_and_reports_inconsistencies(store):
    create(store, "a")
    _finish(store, "a")
    assert check(store) == []
    create(store, "b")
    epoch, _ = acquire(store, "b")
    store.apply_one(SetStatus("b", Transition(Status.FAILED, T0, release=True), epoch))
    problems = check(store)
    assert [(p.invocation_id, p.seq) for p in problems] == [("b", None)]
    assert "no terminal entry" in str(problems[0])


def test_check_accepts_a_seq_left_unused_by_an_operation_that_journaled_nothing(store):
    # Seq 2 was taken by a step that a failing sibling cancelled before it journaled anything.
    create(store, "a")
    epoch, _ = acquire(store, "a")
    append(store, "a", epoch, (1, step()), (3, encode_entry(Completed(T0, encode_value(1)))),
           transition=Transition(Status.COMPLETED, T0, release=True))
    assert check(store) == []


def test_export_decodes_every_value(store):
    create(store, "a", value={"q": "why"})
    _finish(store, "a")
    rows = list(export(store, "a"))
    assert [r["kind"] for r in rows] == ["started", "step", "completed"]
    assert rows[0]["input"] == {"q": "why"} and rows[1]["value"] == "v" and rows[2]["value"] == "ok"
    assert all(r["at"].endswith("Z") for r in rows)


def test_compact_shrinks_the_file_and_keeps_everything(tmp_path):
    path = tmp_path / "db"
    with LmdbStore(path) as store:
        for i in range(40):
            create(store, f"i{i}")
            epoch, _ = acquire(store, f"i{i}")
            append(store, f"i{i}", epoch, *[(s, step(str(s), "z" * 4000)) for s in range(1, 30)])
        store.delete([f"i{i}" for i in range(35)])
        before, after = compact(store)
    assert after < before / 2
    with LmdbStore(path) as store:
        assert sorted(r.id for r in store.list()) == [f"i{i}" for i in range(35, 40)]
        assert store.entry_count("i39") == 30
        assert check(store) == []


def test_a_crash_during_compact_loses_nothing(tmp_path):
    path = str(tmp_path / "db")
    with LmdbStore(path) as store:
        for i in range(30):
            create(store, f"i{i}")
            epoch, _ = acquire(store, f"i{i}")
            append(store, f"i{i}", epoch, *[(s, step(str(s), "q" * 3000)) for s in range(1, 40)])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = textwrap.dedent("""
        import sys
        from journal import LmdbStore, compact
        with LmdbStore(sys.argv[1]) as s:
            print("compacting", flush=True)
            while True:
                compact(s)
    """)
    # Killed once it compacts (however long its start-up takes), at moments spread over its loop.
    for delay in (0.0, 0.05, 0.15, 0.3):
        proc = subprocess.Popen([sys.executable, "-c", code, path], env=dict(os.environ, PYTHONPATH=root),
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "compacting\n"
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        with LmdbStore(path) as store:
            assert len(store.list()) == 30
            assert all(store.entry_count(f"i{i}") == 40 for i in range(30))
            assert check(store) == []
