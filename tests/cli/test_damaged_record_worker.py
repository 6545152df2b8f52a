"""One invocation's record damaged (four garbage bytes where it is stored) stops nothing but
that invocation: `journal worker` runs the healthy ones, and says once which it skipped
(the listing, `check` and `serve` are in test_damaged_record.py)."""

import json

import pytest

from .conftest import target

GARBAGE = b"\xde\xad\xbe\xef"


def _damage_lmdb(db: str, invocation_id: str) -> None:
    import lmdb

    env = lmdb.open(db, max_dbs=16)
    try:
        invocations = env.open_db(b"invocations")  # (before the write transaction: it takes one itself)
        with env.begin(write=True) as txn:
            assert txn.put(invocation_id.encode(), GARBAGE, db=invocations)
    finally:
        env.close()


def _damage_postgres(url: str, invocation_id: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        done = conn.execute("update journal.invocations set v = %s where invocation_id = %s",
                            [GARBAGE, invocation_id.encode()])
        assert done.rowcount == 1


@pytest.fixture(params=["lmdb", "postgres"])
def store(request, tmp_path):
    """(the store's name, how a worker is given the handler, how to damage a record)."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url"), "greet", ["--handler", f"greet={target('greet')}"], \
            _damage_postgres
    return str(tmp_path / "db"), target("greet"), [], _damage_lmdb


def test_a_worker_runs_the_healthy_invocations_and_skips_a_damaged_record_once(sh, store):
    db, handler, handlers, damage = store
    for name in ("ann", "bad", "bob"):
        started = sh("start", handler, "--input", json.dumps(name), "--id", name, "--db", db, use_db=False)
        assert started.returncode == 0, started.stderr
    damage(db, "bad")
    done = sh("worker", "--until-idle", *handlers, "--db", db, use_db=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for name in ("ann", "bob"):
        shown = json.loads(sh("show", name, "--json", "--db", db, use_db=False).stdout)
        assert shown["status"] == "completed" and shown["result"] == f"hello {name}"
    skipped = [line for line in done.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 1, done.stderr
    assert skipped[0].startswith("[bad] skipped:") and "does not decode" in skipped[0]
