"""`journal.migrate`: PostgreSQL format 1 to 2 keeps every row, key for key, and an error
half-way through leaves the format-1 store exactly as it was."""

import psycopg
import pytest

from journal import FORMAT_VERSIONS, PostgresStore, Query, check, migrate
from journal.backends.postgres._rows import LAYOUTS
from journal.errors import StoreBusy, StoreError

from ..golden.postgres_v1 import load_golden


def old_rows(url: str) -> dict[str, set[tuple[bytes, bytes]]]:
    with psycopg.connect(url) as conn:
        tables = [t for (t,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'journal'").fetchall()]
        return {t: {(bytes(k), bytes(v)) for k, v in conn.execute(f"SELECT k, v FROM journal.{t}").fetchall()}
                for t in tables}


def new_rows(url: str) -> dict[str, set[tuple[bytes, bytes]]]:
    """Every row of the format-2 tables with its columns joined back into the rules' key."""
    found = {}
    with psycopg.connect(url) as conn:
        for table, layout in LAYOUTS.items():
            rows = conn.execute(f"SELECT {', '.join(layout.columns)}, v FROM journal.{table}").fetchall()
            found[table] = {(layout.join(row[:-1]), bytes(row[-1])) for row in rows}
        found["tables"] = {(bytes(k), bytes(v)) for k, v in conn.execute("SELECT k, v FROM journal.tables")}
    return found


def test_every_row_keeps_its_key_and_value_and_only_the_format_changes(pg_server):
    url = load_golden(pg_server)
    before = old_rows(url)
    copied: dict[str, int] = {}
    done = migrate(url, progress=lambda table, rows: copied.__setitem__(table, rows))
    assert (done.backend, done.found, done.current, done.changed) == ("postgresql", 1, 2, True)
    assert done.rows == sum(len(rows) for rows in before.values()) == sum(copied.values())
    assert copied == {t: len(rows) for t, rows in before.items() if rows}
    after = new_rows(url)
    assert after.pop("meta") == {r for r in before.pop("meta") if r[0] != b"format"} | {(b"format", b"2")}
    assert after.pop("listing") == set()  # the listing index (format 2's since), built by the first page
    for table in ("inbox", "messages", "published", "topics"):  # added within format 2: nothing sent yet
        assert after.pop(table) == set()
    assert after == {t: before[t] for t in after}
    with PostgresStore(url) as store:
        assert len(store.list()) == 7 and check(store) == []
        assert len(store.page(Query()).items) == 7


def test_an_error_half_way_leaves_the_old_store_as_it_was(pg_server):
    url = load_golden(pg_server)
    before = old_rows(url)

    def fail_after_the_entries(table: str, rows: int) -> None:
        if table == "entries":
            raise KeyboardInterrupt  # as Ctrl-C would, once rows are copied into the new tables

    with pytest.raises(KeyboardInterrupt):
        migrate(url, progress=fail_after_the_entries)
    assert old_rows(url) == before
    with psycopg.connect(url) as conn:
        schemas = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'journal%'").fetchall()
    assert schemas == [("journal",)]
    assert migrate(url).changed
    assert migrate(url).found == FORMAT_VERSIONS["postgresql"]


def test_tables_held_by_another_session_make_it_give_up_with_nothing_changed(pg_server):
    url = load_golden(pg_server)
    before = old_rows(url)
    with psycopg.connect(url) as holder:  # a worker of the older release, in a transaction
        holder.execute("SELECT count(*) FROM journal.entries").fetchone()
        with pytest.raises(StoreBusy, match="stayed in use for 0.2 s.*journal migrate again"):
            migrate(url, lock_timeout=0.2)
    assert old_rows(url) == before
    assert migrate(url, lock_timeout=0.2).changed  # once the holder's transaction has ended


def test_a_table_journal_did_not_create_is_not_dropped_with_the_old_schema(pg_server):
    url = load_golden(pg_server)
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE journal.audit (note text)")
        conn.execute("INSERT INTO journal.audit VALUES ('keep me')")
    with pytest.raises(StoreError, match=r"tables journal did not create \(audit\)"):
        migrate(url)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT note FROM journal.audit").fetchall() == [("keep me",)]
        assert conn.execute("SELECT v FROM journal.meta WHERE k = 'format'").fetchone()[0] == b"1"
