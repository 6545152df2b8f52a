"""The PostgreSQL store of format 1 kept in `postgres-v1/` (its README says how it was made
and what it holds): refused as it is, naming `journal migrate`, then migrated and read
back whole by the current release, its suspended invocation finishing when resolved."""

import json

import pytest
from click.testing import CliRunner

from cli import cli
from journal import FORMAT_VERSIONS

from .postgres_v1 import DUMP, load_golden

TICKET = "tests.golden.pg_handlers:ticket"


@pytest.fixture
def golden_url(pg_server):
    return load_golden(pg_server)


@pytest.fixture
def journal(golden_url, monkeypatch):
    monkeypatch.delenv("JOURNAL_DB", raising=False)

    def invoke(*args: str):
        return CliRunner().invoke(cli, [*args, "--db", golden_url], catch_exceptions=False)

    return invoke


def test_postgres_format_1_is_kept_as_a_golden_store_while_format_2_is_current():
    # When PostgreSQL's format changes again, keep postgres-v1 and add the new one beside it.
    assert FORMAT_VERSIONS["postgresql"] == 2
    with open(DUMP) as dump:
        assert "CREATE TABLE journal.entries (\n    k bytea NOT NULL,\n    v bytea NOT NULL\n);" in dump.read()


def test_the_golden_store_is_refused_untouched_until_migrated_then_reads_back_whole(journal, golden_url):
    refused = journal("ls")
    assert refused.exit_code == 2
    assert "format version 1" in refused.stderr and "PostgreSQL format 2" in refused.stderr
    assert f"journal migrate --db '{golden_url}'" in refused.stderr

    migrated = journal("migrate", "--json")
    assert migrated.exit_code == 0, migrated.stderr
    assert json.loads(migrated.stdout) == {"backend": "postgresql", "found": 1, "current": 2, "migrated": True,
                                           "rows": 49}

    checked = journal("check", "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout) == {"ok": True, "invocations": 7, "problems": []}
    rows = {r["id"]: (r["handler"].rsplit(":", 1)[1], r["status"], r["entries"])
            for r in json.loads(journal("ls", "--json").stdout)}
    assert rows == {
        "done": ("ticket", "completed", 4), "waiting": ("ticket", "suspended", 2),
        "napping": ("nap", "suspended", 2), "turn-1": ("turn", "completed", 4), "turn-2": ("turn", "completed", 4),
        "parent": ("parent", "completed", 4), "parent-child": ("child", "completed", 3),
    }

    done = json.loads(journal("show", "done", "--json").stdout)
    text = "please refund me: h\u00e9las \u2713 \x1b[31mred\x07 nul\x00 end"
    assert done["input"] == text
    assert done["result"] == {"category": "billing", "approved": True, "text": text}
    assert [(e["kind"], e["name"]) for e in done["entries"]] == [
        ("started", None), ("step", "classify"), ("promise", "approve"), ("completed", None)]
    shown = journal("show", "done")
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout and "\\x1b[31mred\\x07" in shown.stdout

    napping = json.loads(journal("show", "napping", "--json").stdout)
    assert napping["wake_at"] == "2036-11-28T02:04:51.437813Z"
    assert [e["kind"] for e in napping["entries"]] == ["started", "sleep"]
    parent = json.loads(journal("show", "parent", "--json").stdout)
    assert [e["kind"] for e in parent["entries"]] == ["started", "called", "promise", "completed"]
    assert parent["result"] == ["A", "SS", "C"]
    assert json.loads(journal("show", "parent-child", "--json").stdout)["parent"] == "parent"

    state = json.loads(journal("state", "thread-\u00e9", "--json").stdout)
    assert state == {"key": "thread-\u00e9", "state": {"history": ["Bonjour, je suis \u00c9mile", "\x1b[2Jcleared?"]},
                     "queue": []}

    # The invocation suspended on a promise before the migration finishes after it.
    assert journal("resolve", "waiting", "approve", "false").exit_code == 0
    resumed = journal("resume", "waiting", "--json", "--handler", TICKET)
    assert resumed.exit_code == 0, resumed.stderr
    assert json.loads(resumed.stdout)["result"] == {
        "category": "other", "approved": False, "text": "hello \u00fcber \x1b]0;title\x07"}
    assert journal("check").exit_code == 0


def test_migrating_the_migrated_store_again_changes_nothing(journal):
    assert journal("migrate").exit_code == 0
    again = journal("migrate", "--json")
    assert again.exit_code == 0
    assert json.loads(again.stdout) == {"backend": "postgresql", "found": 2, "current": 2, "migrated": False,
                                        "rows": 0}
    assert "already at format 2" in journal("migrate").stderr
