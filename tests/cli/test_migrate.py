"""`journal migrate`: a PostgreSQL store of format 1 converted in one transaction (a SIGKILL
in the middle leaves the old store whole), and every store that needs nothing left as it is."""

import json
import signal
import subprocess
import sys

import lmdb
import psycopg
import pytest

from ..golden.postgres_v1 import load_golden
from ..waiting import Lines
from .conftest import loads, target

BULK = 300_000  # format-1 entries added to the golden store: the copy takes a while


def fingerprint(url: str) -> dict:
    """Every table of the `journal` schema: its columns, row count and a digest of its rows."""
    with psycopg.connect(url) as conn:
        tables = [t for (t,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'journal' ORDER BY tablename").fetchall()]
        found = {}
        for table in tables:
            columns = [c for (c,) in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'journal' "
                "AND table_name = %s ORDER BY ordinal_position", (table,)).fetchall()]
            found[table] = (columns, *conn.execute(
                f"SELECT count(*), md5(string_agg(t::text, ',' ORDER BY t::text)) FROM journal.{table} t").fetchone())
        schemas = [s for (s,) in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'journal%' ORDER BY nspname").fetchall()]
    return {"tables": found, "schemas": schemas}


@pytest.fixture
def big_v1(pg_server):
    url = load_golden(pg_server)
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO journal.entries (k, v) SELECT 'bulk'::bytea || '\\x00'::bytea || int4send(g), "
                     "decode(repeat('ab', 64), 'hex') FROM generate_series(0, %s) g", (BULK - 1,))
    return url


def test_a_sigkill_during_the_migration_leaves_the_old_store_whole_and_a_second_one_succeeds(sh, big_v1):
    before = fingerprint(big_v1)
    assert before["tables"]["entries"][0] == ["k", "v"] and before["schemas"] == ["journal"]
    proc = subprocess.Popen([sys.executable, "-m", "cli", "migrate", "--db", big_v1], stderr=subprocess.PIPE,
                            text=True, env=sh.env)
    with proc:
        lines = Lines(proc.stderr)
        try:
            lines.wait_for("rows of entries")  # in the middle of copying the entries
        finally:
            proc.send_signal(signal.SIGKILL)
        lines.text()
    assert proc.returncode == -signal.SIGKILL
    # Reading waits for the killed session's locks: the server rolls its transaction back.
    assert fingerprint(big_v1) == before
    refused = sh("ls", "--db", big_v1, use_db=False)
    assert refused.returncode == 2 and "journal migrate" in refused.stderr

    done = sh("migrate", "--db", big_v1, "--json", use_db=False, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["migrated"] and report["found"] == 1 and report["current"] == 2
    after = fingerprint(big_v1)
    assert after["schemas"] == ["journal"]
    assert after["tables"]["entries"][0] == ["invocation_id", "seq", "v"]
    assert after["tables"]["entries"][1] == before["tables"]["entries"][1]  # every entry, bulk ones included
    listed = sh("ls", "--db", big_v1, "--json", use_db=False)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 7


def test_a_current_lmdb_store_is_said_to_need_nothing_and_is_left_as_it_is(journal, db, tmp_path):
    assert journal("run", target("greet"), "--input", '"Ada"').exit_code == 0
    before = (tmp_path / "db" / "data.mdb").read_bytes()
    said = journal("migrate")
    assert said.exit_code == 0 and "LMDB store" in said.stderr and "already at format 1" in said.stderr
    assert loads(journal("migrate", "--json").stdout) == {
        "backend": "lmdb", "found": 1, "current": 1, "migrated": False, "rows": 0}
    assert (tmp_path / "db" / "data.mdb").read_bytes() == before


def test_an_lmdb_store_of_a_newer_format_is_refused_and_left_as_it_is(journal, db, tmp_path):
    assert journal("run", target("greet"), "--input", '"Ada"').exit_code == 0
    env = lmdb.open(db, max_dbs=16)
    with env.begin(write=True) as txn:
        txn.put(b"format", b"99", db=env.open_db(b"meta", txn=txn))
    env.close()
    before = (tmp_path / "db" / "data.mdb").read_bytes()
    refused = journal("migrate")
    assert refused.exit_code == 2
    assert "format version 99" in refused.stderr and "LMDB format 1" in refused.stderr
    assert (tmp_path / "db" / "data.mdb").read_bytes() == before


def test_migrate_without_a_store_says_there_is_none_and_creates_nothing(journal, db, tmp_path):
    missing = journal("migrate")
    assert missing.exit_code == 2 and "no journal store" in missing.stderr
    assert not (tmp_path / "db").exists()


def test_a_postgres_store_of_a_newer_format_is_refused_and_left_as_it_is(journal, postgres_url):
    assert journal("run", target("greet"), "--input", '"Ada"', "--db", postgres_url, use_db=False).exit_code == 0
    with psycopg.connect(postgres_url) as conn:
        conn.execute("UPDATE journal.meta SET v = '3' WHERE k = 'format'")
    before = fingerprint(postgres_url)
    refused = journal("migrate", "--db", postgres_url, use_db=False)
    assert refused.exit_code == 2
    assert "format version 3" in refused.stderr and "PostgreSQL format 2" in refused.stderr
    assert fingerprint(postgres_url) == before


def test_a_current_postgres_store_is_said_to_need_nothing(journal, postgres_url):
    assert journal("run", target("greet"), "--input", '"Ada"', "--db", postgres_url, use_db=False).exit_code == 0
    before = fingerprint(postgres_url)
    said = journal("migrate", "--db", postgres_url, use_db=False)
    assert said.exit_code == 0 and "already at format 2" in said.stderr
    assert fingerprint(postgres_url) == before


def test_a_database_without_a_store_is_not_given_one(journal, postgres_url):
    missing = journal("migrate", "--db", postgres_url, use_db=False)
    assert missing.exit_code == 2 and "no journal store" in missing.stderr
    assert fingerprint(postgres_url)["schemas"] == []


def test_the_help_names_the_format_versions_this_release_writes(journal):
    from journal import FORMAT_VERSIONS

    shown = journal("migrate", "--help", use_db=False)
    assert shown.exit_code == 0 and "Example:" in shown.stdout
    assert f"LMDB {FORMAT_VERSIONS['lmdb']}, PostgreSQL {FORMAT_VERSIONS['postgresql']}" in shown.stdout


def test_tables_still_in_use_make_the_command_give_up_with_exit_2(journal, pg_server):
    url = load_golden(pg_server)
    before = fingerprint(url)
    with psycopg.connect(url) as holder:
        holder.execute("SELECT count(*) FROM journal.meta").fetchone()
        busy = journal("migrate", "--db", url, "--lock-timeout", "0.2", use_db=False)
    assert busy.exit_code == 2 and "stayed in use" in busy.stderr and "nothing was changed" in busy.stderr
    assert fingerprint(url) == before
