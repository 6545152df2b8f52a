"""Converting a PostgreSQL store written in an older format to the one this release writes.

PostgreSQL's layout has changed once (format 2: every row of one invocation keyed by an
`invocation_id` column). A store is never converted when it is opened: opening one of
another version is a `FormatVersionError` naming `journal migrate`, which calls `migrate`
here through the backend registry (docs/format.md).

PostgreSQL's DDL is transactional, so a conversion is one transaction: the old schema is
renamed aside, the current one is created under the store's name by the very statements a
new store is created with, every row is copied across (its key split into columns by the
store's own layouts, `_rows.LAYOUTS`), and the old schema is dropped. Whatever
interrupts it before the commit, a `kill -9` included, the server rolls all of it back:
the database holds the old store or the new one, never a mix.
"""

from __future__ import annotations

from typing import Any

from ...errors import FormatVersionError, StoreBusy, StoreError
from .. import Migration, Progress
from ._rows import DDL, LAYOUTS, LOCK_CLASS, SCHEMA
from ._version import FORMAT_VERSION as POSTGRES_FORMAT_VERSION

_ASIDE = f"{SCHEMA}_format1"  # where the old schema waits, inside the transaction, to be dropped
_BATCH = 10_000  # rows read and copied at a time: memory stays bounded on a big store
_TABLES_TABLE = "tables"  # `journal.Tables` (checkpoints, memory): the same `(k, v)` table in both formats


def migrate(url: str, progress: Progress | None, lock_timeout: float) -> Migration:
    """Convert the store at `url` to this release's format, in one transaction (see above);
    `lock_timeout`: seconds to wait for its tables while a process of the older release uses
    them, before giving up with `StoreBusy`, nothing changed."""
    from ._urls import redact_url

    try:
        import psycopg
    except ImportError:
        raise StoreError("a postgresql:// store needs psycopg: pip install 'journal-agents[postgres]'") from None
    where = redact_url(url)
    try:
        conn = psycopg.connect(url, autocommit=True, application_name="journal migrate")
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to the journal store at {where}: {exc}") from None
    try:
        with conn, conn.transaction(), conn.cursor() as cur:
            # The lock a store takes to create its schema: no store opens this one meanwhile.
            cur.execute("SELECT pg_advisory_xact_lock(%s::int, 0)", (LOCK_CLASS,))
            found = _found_version(cur, where)
            if found == POSTGRES_FORMAT_VERSION:
                return Migration("postgresql", found, POSTGRES_FORMAT_VERSION)
            if found != 1:
                raise FormatVersionError(
                    f"the PostgreSQL store at {where} has format version {found}, which this version of "
                    f"journal does not know (it reads PostgreSQL format {POSTGRES_FORMAT_VERSION}); use the "
                    "journal release that wrote it (nothing was changed)")
            try:
                cur.execute(f"SET LOCAL lock_timeout = {max(1, int(lock_timeout * 1000))}")
                _lock_old_tables(cur)
            except psycopg.errors.LockNotAvailable:
                raise StoreBusy(
                    f"the tables of the store at {where} stayed in use for {lock_timeout:g} s (a worker or "
                    "command of the older release?); stop it and run journal migrate again (nothing was "
                    "changed)") from None
            cur.execute("SET LOCAL lock_timeout = 0")  # held now: the copy itself never waits
            rows = _convert_1_to_2(cur, progress)
    except psycopg.Error as exc:
        raise StoreError(f"PostgreSQL error while migrating {where} (nothing was changed): {exc}") from None
    return Migration("postgresql", 1, POSTGRES_FORMAT_VERSION, rows)


def _found_version(cur: Any, where: str) -> int:
    exists = cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.meta",)).fetchone()[0]
    row = cur.execute(f"SELECT v FROM {SCHEMA}.meta WHERE k = 'format'").fetchone() if exists else None
    if row is None:
        raise StoreError(
            f"there is no journal store at {where}: nothing to migrate (a store is created by its "
            "first `journal run` or `journal worker`)")
    text = bytes(row[0]).decode(errors="replace")
    if not text.isdigit():
        raise FormatVersionError(f"the PostgreSQL store at {where} records format {text!r}, which is no "
                                 "version journal ever wrote (nothing was changed)")
    return int(text)


def _old_tables(cur: Any) -> list[str]:
    return [r[0] for r in cur.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (SCHEMA,)).fetchall()]


def _lock_old_tables(cur: Any) -> None:
    """Every table of the store, for the rest of the transaction: the copy reads a store
    nobody changes, and a process of the older release that comes later waits, then
    finds its tables gone."""
    cur.execute(f"LOCK TABLE {', '.join(f'{SCHEMA}.{t}' for t in _old_tables(cur))} IN ACCESS EXCLUSIVE MODE")


def _convert_1_to_2(cur: Any, progress: Progress | None) -> int:
    """Format 1 kept every table as `(k bytea, v bytea)` with the rules' keys, the keys
    format 2 splits into columns; `journal.tables` is the same in both."""
    from ._tables import CREATE as CREATE_TABLES

    old = _old_tables(cur)
    unknown = sorted(set(old) - {*LAYOUTS, _TABLES_TABLE})
    if unknown:
        # The old schema is dropped at the end: a table journal did not make would go with it.
        raise StoreError(
            f"the {SCHEMA} schema holds tables journal did not create ({', '.join(unknown)}); move them to "
            "another schema, then run journal migrate again (nothing was changed)")
    cur.execute(f"ALTER SCHEMA {SCHEMA} RENAME TO {_ASIDE}")
    cur.execute(f"CREATE SCHEMA {SCHEMA}")
    for statement in DDL:
        cur.execute(statement)
    cur.execute(CREATE_TABLES)
    copied = 0
    for table in (*LAYOUTS, _TABLES_TABLE):
        if table in old:
            copied += _copy(cur, table, progress)
    cur.execute(f"UPDATE {SCHEMA}.meta SET v = %s WHERE k = 'format'", (str(POSTGRES_FORMAT_VERSION).encode(),))
    cur.execute(f"DROP SCHEMA {_ASIDE} CASCADE")
    return copied


def _copy(cur: Any, table: str, progress: Progress | None) -> int:
    layout = LAYOUTS.get(table)
    columns = ("k",) if layout is None else layout.columns
    copy_sql = f"COPY {SCHEMA}.{table} ({', '.join((*columns, 'v'))}) FROM STDIN"
    done = 0
    last: bytes | None = None
    while True:
        # Keyset pages over the old primary key: each page one query, no cursor left open
        # across the COPY that writes it.
        rows = cur.execute(
            f"SELECT k, v FROM {_ASIDE}.{table}" + (" WHERE k > %s" if last is not None else "")
            + f" ORDER BY k LIMIT {_BATCH}", (last,) if last is not None else ()).fetchall()
        if not rows:
            return done
        with cur.copy(copy_sql) as copy:
            for k, v in rows:
                key = bytes(k)
                copy.write_row((*((key,) if layout is None else layout.split(key)), bytes(v)))
        done += len(rows)
        last = bytes(rows[-1][0])
        if progress is not None:
            progress(table, done)
