"""`journal trim`, `compact` and `check`."""

import json
import os
import re

import lmdb
import pytest

from cli._common import Exit
from cli._maintain import parse_age

from .conftest import target


@pytest.fixture
def mixed(journal, log):
    """Two completed, one failed and one suspended invocation."""
    journal("run", target("greet"), "--input", '"a"', "--id", "c1")
    journal("run", target("greet"), "--input", '"b"', "--id", "c2")
    journal("run", target("refuses"), "--input", "{}", "--id", "f1")
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "s1")


def listed(journal):
    return {i["id"]: i for i in json.loads(journal("ls", "--json").stdout)}


def test_trim_dry_run_lists_what_would_go_and_removes_nothing(journal, mixed):
    result = journal("trim", "--older-than", "0", "--dry-run", "--json")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert out["dry_run"] is True
    assert sorted((r["id"], r["status"], r["entries"]) for r in out["removed"]) == [
        ("c1", "completed", 3), ("c2", "completed", 3), ("f1", "failed", 3),
    ]
    assert set(listed(journal)) == {"c1", "c2", "f1", "s1"}


def test_trim_removes_finished_invocations_only(journal, mixed):
    result = journal("trim", "--older-than", "0")
    assert result.exit_code == 0
    assert "removed 3 invocations (9 entries)" in result.stderr
    assert all(line.split()[0] in ("ID", "c1", "c2", "f1") for line in result.stdout.splitlines())
    assert set(listed(journal)) == {"s1"}


def test_trim_by_status_and_keep_record(journal, mixed):
    result = journal("trim", "--older-than", "0", "--status", "failed", "--keep-record", "--json")
    assert [r["id"] for r in json.loads(result.stdout)["removed"]] == ["f1"]
    items = listed(journal)
    assert items["f1"]["status"] == "failed" and items["f1"]["entries"] == 0
    assert items["c1"]["entries"] == 3
    assert "none (the journal was trimmed)" in journal("show", "f1").stdout


def test_trim_keeps_recent_invocations_by_default(journal, mixed):
    result = journal("trim")
    assert "removed 0 invocations" in result.stderr and "older than 7d00h" in result.stderr
    assert len(listed(journal)) == 4


def test_trim_refuses_unfinished_statuses(journal, mixed):
    result = journal("trim", "--status", "suspended")
    assert result.exit_code == 2
    assert "'suspended' is not one of" in result.stderr


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("12h", 43200), ("7d", 604800),
                                           ("2w", 1209600), ("1h30m", 5400), ("0", 0), ("2.5", 2.5)])
def test_ages_parse(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "d", "1y", "-3d"])
def test_bad_ages_are_usage_errors(text):
    with pytest.raises(Exit) as caught:
        parse_age(text)
    assert caught.value.code == 2 and "is not a duration" in caught.value.message


def test_bad_age_on_the_command_line(journal, mixed):
    result = journal("trim", "--older-than", "a week")
    assert result.exit_code == 2 and "is not a duration" in result.stderr


def test_compact_after_trim_shrinks_the_file(journal, db):
    big = json.dumps("x" * 200_000)
    for n in range(20):
        journal("run", target("greet"), "--input", big, "--id", f"big{n}")
    journal("run", target("greet"), "--input", '"keep"', "--id", "keep")
    journal("trim", "--older-than", "0", "--status", "completed")
    before = os.path.getsize(os.path.join(db, "data.mdb"))
    result = journal("compact", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["before"] == before and out["after"] < before / 4
    assert os.path.getsize(os.path.join(db, "data.mdb")) == out["after"]
    assert journal("check").exit_code == 0
    human = journal("compact")
    # Human units; a second compaction has nothing left to reclaim.
    assert re.fullmatch(rf"compacted {re.escape(db)}: (\d+\.\d KiB) -> \1 \(saved 0 B\)\n", human.stdout)


def test_check_of_a_sound_store_exits_0(journal, mixed):
    result = journal("check", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"ok": True, "invocations": 4, "problems": []}
    assert "checked 4 invocations: no problems" in journal("check").stderr


def test_check_reports_a_damaged_entry_with_its_seq_and_exits_1(journal, mixed, db):
    env = lmdb.open(db, max_dbs=16)
    entries = env.open_db(b"entries")
    with env.begin(write=True) as txn:
        txn.put(b"c2\x00" + (1).to_bytes(4, "big"), b"\xff\x00garbage", db=entries)
    env.close()
    result = journal("check", "--json")
    assert result.exit_code == 1
    problems = json.loads(result.stdout)["problems"]
    assert {(p["invocation_id"], p["seq"]) for p in problems} == {("c2", 1)}
    assert any("does not decode" in p["message"] for p in problems)
    human = journal("check")
    assert human.exit_code == 1 and "invocation 'c2' seq 1" in human.stdout
    shown = json.loads(journal("show", "c2", "--json").stdout)
    assert shown["entries"][1]["kind"] == "corrupt"
