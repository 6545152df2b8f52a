"""`journal ls`, `show`, `tail` and `export`: what they print, human and --json."""

import datetime
import json

import click
import pytest

from .conftest import target


@pytest.fixture
def approved(journal, log):
    """An approval invocation run to completion: draft, promise, publish."""
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "owls"}), "--id", "done")
    journal("resolve", "done", "approval", '{"approved": true, "by": "ada"}')
    assert journal("resume", "done").exit_code == 0
    return "done"


def _is_iso_utc(text):
    return text.endswith("Z") and datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).tzinfo is not None


def test_ls_json_lists_every_invocation_with_the_stable_fields(journal, approved, log):
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "waits")
    items = json.loads(journal("ls", "--json").stdout)
    assert [i["id"] for i in items] == ["done", "waits"]
    for item in items:
        assert set(item) == {"id", "handler", "status", "key", "created_at", "updated_at", "entries", "priority",
                             "start_at", "tags"}
        assert item["tags"] == {}
        assert _is_iso_utc(item["created_at"]) and _is_iso_utc(item["updated_at"])
    assert items[0]["status"] == "completed" and items[0]["entries"] == 5
    assert items[1]["status"] == "suspended" and items[1]["entries"] == 2
    assert items[0]["handler"] == target("approval")


def test_ls_filters_by_status_and_limits(journal, approved, log):
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "waits")
    journal("run", target("greet"), "--input", '"x"', "--id", "later")
    suspended = json.loads(journal("ls", "--status", "suspended", "--json").stdout)
    assert [i["id"] for i in suspended] == ["waits"]
    assert [i["id"] for i in json.loads(journal("ls", "--limit", "1", "--json").stdout)] == ["later"]


def test_ls_table_keeps_long_ids_whole_and_shortens_the_handler(journal):
    long_id = "an-invocation-id-that-is-much-longer-than-any-table-column-would-like-" + "x" * 40
    journal("run", target("greet"), "--input", '"a"', "--id", long_id)
    journal("run", target("greet"), "--input", '"b"', "--id", "short")
    result = journal("ls")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "HANDLER", "ENTRIES", "UPDATED"]
    assert [line.split()[0] for line in lines[1:]] == [long_id, "short"]  # the id others are given, whole
    assert any(line.startswith("short ") and "completed" in line and "cli_agents.…" in line for line in lines)


def test_ls_keeps_a_generated_id_whole_and_shortens_the_handler_first(journal):
    run = journal("run", target("approval"), "--input", '{"log": "/dev/null", "topic": "x"}', "--json")
    generated = json.loads(run.stdout)["id"]
    assert len(generated) == 32
    lines = journal("ls").stdout.splitlines()
    assert lines[1].startswith(generated + "  ")
    # (how much of the handler fits depends on the age column: "5ms ago" or "30ms ago")
    assert "  cli_agents.py:" in lines[1] and "…" in lines[1] and len(lines[1]) <= 80


def test_ls_of_an_empty_store_says_so(journal, db):
    journal("run", target("greet"), "--input", "1")  # wrong type: exit 2, but the store exists from now on
    import os

    os.makedirs(db, exist_ok=True)
    result = journal("ls")
    assert result.exit_code == 0
    assert result.stdout == "" and "no invocations" in result.stderr


def test_show_json_has_the_stable_shape_and_every_entry(journal, approved):
    out = json.loads(journal("show", approved, "--json").stdout)
    assert {"id", "handler", "status", "input", "result", "error", "entries"} <= set(out)
    assert out["status"] == "completed"
    assert out["input"]["topic"] == "owls"
    assert out["result"] == {"draft": "draft about owls", "by": "ada", "published": "published"}
    assert out["error"] is None
    kinds = [(e["seq"], e["kind"], e["name"]) for e in out["entries"]]
    assert kinds == [(0, "started", None), (1, "step", "draft"), (2, "promise", "approval"),
                     (3, "step", "publish"), (4, "completed", None)]
    assert out["entries"][1]["value"] == "draft about owls"
    assert out["entries"][2]["value"] == {"approved": True, "by": "ada"}
    assert all(_is_iso_utc(e["at"]) for e in out["entries"])


def test_show_json_of_a_failed_step_carries_its_error(journal):
    journal("run", target("refuses"), "--input", "{}", "--id", "f")
    out = json.loads(journal("show", "f", "--json").stdout)
    step = out["entries"][1]
    assert (step["kind"], step["name"]) == ("step", "ask")
    assert step["error"]["message"] == "the model refused" and "value" not in step
    assert out["error"]["message"] == "the model refused"


def test_show_prints_a_header_and_one_row_per_entry(journal, approved):
    result = journal("show", approved)
    assert result.exit_code == 0
    text = result.stdout
    assert "invocation  done" in text
    assert "status      completed" in text
    assert 'input       {"log":' in text
    rows = [line.split(None, 4) for line in text.splitlines() if line[:3].strip().isdigit()]
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("0", "started", "-"), ("1", "step", "draft"), ("2", "promise", "approval"),
        ("3", "step", "publish"), ("4", "completed", "-"),
    ]
    assert all(len(line) <= 80 for line in text.splitlines())


def test_show_of_a_suspended_invocation_gives_the_resolve_command(journal, log, db):
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "s")
    text = journal("show", "s").stdout
    assert "suspended (waiting for promise 'approval')" in text
    assert f"journal resolve s approval true --db {db}" in text


def test_show_of_an_unknown_invocation_exits_2(journal, approved):
    result = journal("show", "nope")
    assert result.exit_code == 2
    assert "no invocation 'nope'" in result.stderr


def test_tail_prints_entries_in_fixed_columns(journal, approved):
    result = journal("tail", approved)
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["0", "1", "2", "3", "4"]
    assert [line[20:29].strip() for line in lines] == ["started", "step", "promise", "step", "completed"]
    assert all(len(line) <= 80 for line in lines)


def test_tail_last_n_and_json_lines(journal, approved):
    result = journal("tail", approved, "-n", "2", "--json")
    items = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(i["seq"], i["kind"]) for i in items] == [(3, "step"), (4, "completed")]


def test_tail_after_a_seq_goes_on_where_a_follower_stopped(journal, approved):
    result = journal("tail", approved, "-f", "--after", "2", "--json")
    assert result.exit_code == 0
    assert [json.loads(line)["seq"] for line in result.stdout.splitlines()] == [3, 4]


def test_tail_follow_on_a_finished_invocation_returns_at_once(journal, approved):
    result = journal("tail", approved, "-f")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 5


def test_export_json_and_jsonl_agree(journal, approved):
    document = json.loads(journal("export", approved).stdout)
    lines = [json.loads(line) for line in journal("export", approved, "--format", "jsonl").stdout.splitlines()]
    assert document["entries"] == lines
    assert document == json.loads(journal("show", approved, "--json").stdout)


def test_long_values_are_cut_with_an_ellipsis_in_tables(journal):
    journal("run", target("greet"), "--input", json.dumps("x" * 500), "--id", "long")
    text = click.unstyle(journal("show", "long").stdout)
    step = next(line for line in text.splitlines() if line.lstrip().startswith("1 "))
    assert step.endswith("…") and len(step) <= 80
