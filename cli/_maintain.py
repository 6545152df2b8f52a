"""Commands that keep a store healthy: trim, compact, check."""

from __future__ import annotations

import re
import time

import click

from journal import FINISHED
from journal import check as check_store
from journal import compact as compact_store
from journal import trim as trim_store
from journal.backends import NothingToCompact

from . import _render as render
from ._common import FAILED, OK, Exit, db_option, echo_err, edge, fail, json_option, open_store, out
from ._inspect import short_handler

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_age(text: str) -> float:
    """`7d`, `12h`, `1h30m`, `90s` or a plain number of seconds, as seconds."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    if not text or _PART.sub("", text):
        raise fail(f"--older-than {text!r} is not a duration; write it like 90s, 15m, 12h, 7d, 2w or 1h30m")
    return sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))


@click.command()
@click.option("--older-than", "older_than", metavar="AGE", default="7d", show_default=True,
              help="Only invocations last updated longer ago than AGE (90s, 15m, 12h, 7d, 2w; 0 for any).")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(sorted(s.value for s in FINISHED)),
              help="Only this finished status (repeat for several; default: all finished ones).")
@click.option("--keep-record", is_flag=True, help="Keep each invocation's record (status, result); drop its entries.")
@click.option("--dry-run", is_flag=True, help="Only show what would be removed.")
@db_option
@json_option
@edge
def trim(older_than: str, statuses: tuple[str, ...], keep_record: bool, dry_run: bool, db: str | None,
         as_json: bool) -> None:
    """Remove the journals of finished invocations.

    Finished means completed, failed or cancelled.

    Unfinished invocations are never trimmed. Trimming frees pages inside the store for
    reuse; `journal compact` then shrinks the file itself.

    Example:

    \b
        journal trim --older-than 7d --status completed --dry-run
    """
    seconds = parse_age(older_than)
    now = time.time_ns() // 1000  # one cut-off for the count and the removal
    with open_store(db, readonly=dry_run) as store:
        chosen = trim_store(store, older_than_s=seconds, statuses=statuses or None, dry_run=True, now_us=now)
        counts = {r.id: store.entry_count(r.id) for r in chosen}
        if not dry_run:
            chosen = trim_store(store, older_than_s=seconds, statuses=statuses or None, keep_record=keep_record,
                                now_us=now)
            store.sync()
    if as_json:
        click.echo(render.to_json({
            "dry_run": dry_run,
            "kept_records": keep_record,
            "removed": [{"id": r.id, "status": r.status.value, "updated_at": render.iso(r.updated_at),
                         "entries": counts.get(r.id, 0)} for r in chosen],
        }))
        return
    if chosen:
        rows = [[r.id, render.status(r.status), short_handler(r.handler), str(counts.get(r.id, 0)),
                 render.age(r.updated_at)] for r in chosen]
        out(render.table(("ID", "STATUS", "HANDLER", "ENTRIES", "UPDATED"), rows, flex=(2, 0), right=(3,)))
    total = sum(counts.get(r.id, 0) for r in chosen)
    verb = "would remove" if dry_run else "removed"
    what = "journal" if keep_record else "invocation"
    echo_err(f"{verb} {len(chosen)} {what}{'s' if len(chosen) != 1 else ''} ({total} entries)"
             + (" older than " + render.duration(seconds) if seconds else ""))


@click.command()
@click.option("--force", is_flag=True,
              help="Skip the scan for other programs mapping the file (journal processes are always refused).")
@db_option
@json_option
@edge
def compact(force: bool, db: str | None, as_json: bool) -> None:
    """Shrink the store file by dropping its free pages.

    Run `journal trim` first to free pages.

    The compacted copy replaces the file atomically: a crash leaves either the old or
    the new file, both whole. Stop workers and other `journal` processes on this store
    first: LMDB cannot swap the file under a process that has it open, so compact
    refuses while one has, and a journal command started meanwhile is refused (exit 2)
    instead of writing into the file being replaced.

    Example:

    \b
        journal trim --older-than 30d && journal compact
    """
    with open_store(db, readonly=False) as store:
        try:
            before, after = compact_store(store, force=force)
        except NothingToCompact as exc:
            raise Exit(OK, str(exc)) from None
        path = store.path
    if as_json:
        click.echo(render.to_json({"path": path, "before": before, "after": after}))
        return
    out(f"compacted {path}: {render.size(before)} -> {render.size(after)} "
               f"(saved {render.size(max(before - after, 0))})")


@click.command()
@db_option
@json_option
@edge
def check(db: str | None, as_json: bool) -> None:
    """Verify the integrity of the store.

    Every record and entry must decode, a journal starts with its start entry and a
    finished one ends with one terminal entry, and indexes agree.

    Exit status 0 if the store is sound, 1 if problems were found (each is listed with
    its invocation and seq).

    Example:

    \b
        journal check --json
    """
    with open_store(db) as store:
        problems = check_store(store)
        records = len(store.list())
    if as_json:
        click.echo(render.to_json({
            "ok": not problems,
            "invocations": records,
            "problems": [{"invocation_id": p.invocation_id, "seq": p.seq, "message": p.message} for p in problems],
        }))
    else:
        for problem in problems:
            out(str(problem))
        echo_err(f"checked {records} invocation{'s' if records != 1 else ''}: "
                 + (f"{len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else "no problems"))
    raise Exit(FAILED if problems else OK)
