"""`journal migrate`: convert a store of an older format to the one this release writes."""

from __future__ import annotations

import click

from journal import migrate as migrate_store
from journal.backends import backend_for

from . import _render as render
from ._common import OK, Exit, db_option, echo_err, edge, existing_store, json_option


@click.command()
@click.option("--lock-timeout", metavar="SECONDS", type=click.FloatRange(min=0.001), default=10.0, show_default=True,
              help="How long to wait for the store's tables while a process of the older release uses them.")
@db_option
@json_option
@edge
def migrate(lock_timeout: float, db: str | None, as_json: bool) -> None:
    """Convert a store of an older format to the one this release writes.

    \b
    Format versions this release writes: LMDB 1, PostgreSQL 2.

    A store of another format is refused when opened, and never converted silently;
    this command converts it, in one transaction: interrupted at any point (even by
    kill -9), it leaves the old store as it was, and running it again starts over.
    Stop every worker of the store first: if a process of the older release still
    uses its tables after --lock-timeout seconds, the command gives up (exit 2) and
    changes nothing.

    A store already at the current format is left as it is (exit 0). A store of a
    newer format is refused (exit 2): use the release that wrote it.

    Example:

    \b
        journal migrate --db postgresql://journal@db.internal/agents
    """
    target = existing_store(db)

    def progress(table: str, rows: int) -> None:
        echo_err(f"copied {rows} row{'s' if rows != 1 else ''} of {table}")

    done = migrate_store(target, progress=None if as_json else progress, lock_timeout=lock_timeout)
    backend = backend_for(target)
    name, shown = backend.title, backend.describe(target)
    if as_json:
        click.echo(render.to_json({"backend": done.backend, "found": done.found, "current": done.current,
                                   "migrated": done.changed, "rows": done.rows}))
    elif done.changed:
        echo_err(f"migrated the {name} store at {shown} from format {done.found} to {done.current} "
                 f"({done.rows} rows copied, in one transaction)")
    else:
        echo_err(f"the {name} store at {shown} is already at format {done.current}, the one this "
                 "release writes: nothing was changed")
    raise Exit(OK)
