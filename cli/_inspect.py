"""Commands that read the store: ls, show, tail, export."""

from __future__ import annotations

import base64
import datetime
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import click
import msgspec

from journal import (
    TERMINAL_KINDS,
    Damaged,
    Entry,
    Failed,
    InvocationRecord,
    Query,
    Status,
    Store,
    expand_id,
    kind_of,
    promise_type,
    retries,
)
from journal.backends import describe
from journal.errors import AmbiguousId, CorruptEntry, InvocationNotFound, StoreError
from journal.views import (
    children_of,
    decoded,
    entry_view,
    forked_from,
    invocation_json,
    listed_json,
    owner_json,
    summary_json,
    updated_us,
)
from journal.views import export as export_entries

from . import _render as render
from ._common import (
    INTERRUPTED,
    OK,
    USAGE,
    Exit,
    db_option,
    echo_err,
    edge,
    existing_store,
    json_option,
    open_store,
    out,
    store_path,
    suggest,
    tag_option,
    warn_store,
)

if TYPE_CHECKING:
    from journal import Chunk
    from runtime import StreamPosition

_STATUSES = [s.value for s in Status]


def require(store: Store, invocation_id: str) -> InvocationRecord:
    """The invocation that ID on the command line names: its id, or a unique prefix of it."""
    return store.require(expand_id(store, invocation_id))


short_handler = render.short_handler


# -- ls -----------------------------------------------------------------------------------------


@click.command(name="ls")
@click.option("--status", "statuses", multiple=True, type=click.Choice(_STATUSES),
              help="Only invocations with this status (repeat for several).")
@click.option("--key", metavar="KEY", help="Only the invocations of this key (the turns of one thread).")
@click.option("--handler", metavar="NAME", help="Only the invocations of this handler: its NAME, or its TARGET as run or as `ls` shows it (ops.py:slow).")
@tag_option("Only those tagged KEY=VALUE (repeat: every one of them).")
@click.option("--search", "text", metavar="TEXT", help="Only those with TEXT in the id, handler, key or error.")
@click.option("--since", metavar="TIME", help="Only those created at TIME (ISO 8601, UTC unless it says) or later.")
@click.option("--until", metavar="TIME", help="Only those created before TIME.")
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the N most recently created.")
@click.option("--summary", is_flag=True,
              help="Instead, the queue at a glance: how many invocations of each handler have each status, "
              "and how long the oldest runnable one has waited (from the store's counts, reading no record).")
@db_option
@json_option
@edge
def ls(statuses: tuple[str, ...], key: str | None, handler: str | None, tags: dict[str, str], text: str | None,
       since: str | None, until: str | None, limit: int | None, summary: bool, db: str | None, as_json: bool) -> None:
    """List invocations, oldest first.

    A record that does not decode is listed as `damaged` (`journal check` says what is
    wrong), and the others still are.

    Example:

    \b
        journal ls --status suspended --status diverged
        journal ls --search refund --since 2026-12-01
        journal ls --tag customer=acme --status failed
        journal ls --summary
    """
    if summary:
        if statuses or key is not None or handler is not None or tags or text or since or until or limit:
            raise Exit(USAGE, "--summary counts every invocation: it takes no filter (drop the other options)")
        _summary(db, as_json)
        return
    query = Query(statuses=tuple(Status(s) for s in dict.fromkeys(statuses)), handler=_handler_filter(handler), key=key,
                  text=text or None, since=_instant(since, "--since"), until=_instant(until, "--until"),
                  limit=limit or 1000, tags=tuple(tags.items()))
    items: list[InvocationRecord | Damaged] = []
    with open_store(db) as store:
        while True:  # newest first, a page at a time, from the store's listing index
            found = store.page(query)
            items += found.items
            if found.next is None or (limit is not None and len(items) >= limit):
                break
            query = msgspec.structs.replace(query, after=found.next)
        items = items[:limit] if limit is not None else items
        items.reverse()
        rows_json = [listed_json(store, item) for item in items]
        updated = [updated_us(store, item) if isinstance(item, InvocationRecord) else None for item in items]
    if as_json:
        click.echo(render.to_json(rows_json))
        return
    if not items:
        echo_err("no invocations" + (f" with status {', '.join(statuses)}" if statuses else "")
                 + (f" of key {key!r}" if key is not None else "")
                 + render.safe(f" tagged {', '.join(f'{k}={v}' for k, v in tags.items())}" if tags else ""))
        return
    rows = [
        [doc["id"], _listed_status(doc),
         short_handler(doc["handler"]) if doc["handler"] else "?", str(doc["entries"]),
         render.age(moved) if moved is not None else "?"]
        for doc, moved in zip(rows_json, updated, strict=True)
    ]
    # Only the handler gives way: an id is what the other commands are given, so it is never cut
    # (a line wider than the terminal wraps instead).
    out(render.table(("ID", "STATUS", "HANDLER", "ENTRIES", "UPDATED"), rows, flex=(2,), right=(3,)))
    damaged = [item.id for item in items if isinstance(item, Damaged)]
    if damaged:
        echo_err(f"{len(damaged)} record(s) do not decode: {', '.join(map(render.safe, damaged))}; "
                 f"{suggest(['check'], db)} says what is wrong")


def _summary(db: str | None, as_json: bool) -> None:
    with open_store(db) as store:
        doc = summary_json(store.summary())
    if as_json:
        click.echo(render.to_json(doc))
        return
    if not doc["handlers"]:
        echo_err("no invocations")
        return
    rows = [
        [short_handler(h["handler"]), *(str(h["counts"].get(s, 0)) for s in _STATUSES),
         "-" if h["oldest_runnable_seconds"] is None else render.duration(h["oldest_runnable_seconds"])]
        for h in doc["handlers"]
    ]
    headers = ("HANDLER", *(s.upper() for s in _STATUSES), "OLDEST RUNNABLE")
    out(render.table(headers, rows, flex=(0,), right=tuple(range(1, len(headers)))))


def _listed_status(doc: dict[str, Any]) -> str:
    """The STATUS column: a running invocation whose owner is known dead says so."""
    if doc["status"] == "damaged":
        return "damaged"
    shown = render.status(Status(doc["status"]))
    if doc.get("owner") is not None and not doc["owner"]["alive"]:
        return render.Styled(shown + click.style(" (owner gone)", fg="yellow"))
    going = [r["id"] for r in doc.get("retries", ()) if r["status"] not in ("failed", "cancelled")]
    if going:  # a script that retries every failed invocation must not retry this one again
        return render.Styled(shown + render.safe(f" (retried as {going[-1]})"))
    return shown


def _instant(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise Exit(USAGE, f"{option} {text!r} is not an ISO 8601 time (for example 2026-12-01T09:30:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1_000_000)


# -- show ---------------------------------------------------------------------------------------


def _linked(store: Store, invocation_id: str) -> str:
    """`kid-1 (completed)`: an invocation named in a link, with where it stands."""
    other = store.get(invocation_id)
    return f"{invocation_id} ({other.status.value if other is not None else 'removed'})"


def _handler_filter(handler: str | None) -> str | None:
    """`--handler` as the store matches it: a TARGET whose file exists from here is made
    absolute, as `journal run` records it (`../ops.py:slow` too); any other is matched by the
    tail of the recorded path (`ops.py:slow`, what `ls` shows)."""
    if handler is None or ":" not in handler:
        return handler
    path, _, function = handler.rpartition(":")
    if path.endswith(".py") and os.path.isfile(path):
        return f"{os.path.abspath(path)}:{function}"
    return handler


def _links(store: Store, record: InvocationRecord, entries: list[tuple[int, Any]]) -> list[tuple[str, str]]:
    """Rows for the invocations this one is linked to: parent or fork source, children, chain."""
    rows = []
    if record.parent:
        source = forked_from(store, record)
        rows.append(("forked from", record.parent) if source else ("parent", _linked(store, record.parent)))
    children = children_of(entries)
    if children:
        rows.append(("children", ", ".join(_linked(store, c) for c in children)))
    if record.status == Status.FAILED:
        made = retries(store, record.id)
        if made:
            rows.append(("retries", ", ".join(f"{r.id} ({r.status.value})" for r in made)))
    if record.continued_from:
        rows.append(("continued from", _linked(store, record.continued_from)))
    if record.continued_as:
        rows.append(("continued as", _linked(store, record.continued_as)))
    return rows


def _header(record: InvocationRecord, entries: list[tuple[int, Any]],
            links: list[tuple[str, str]], owner: dict[str, Any] | None) -> list[tuple[str, str]]:
    state = render.status(record.status)
    if owner is not None and not owner["alive"]:
        state = render.Styled(state + click.style(" (owner gone)", fg="yellow"))
    if record.waiting is not None:
        state = render.Styled(state + render.safe(f" (waiting for promise {record.waiting!r})"))
    elif record.wake_at is not None:
        state = render.Styled(state + f" (timer until {render.iso(record.wake_at)})")
    rows = [("invocation", record.id), ("handler", record.handler), ("status", state)]
    if owner is not None:
        rows.append(("owner", f"process {owner['pid']} on {owner['host']}, "
                              + ("alive" if owner["alive"] else "gone (killed, or its lease expired)")))
    rows += links
    if record.key:
        rows.append(("key", record.key))
    moved = record.updated_at
    if record.status == Status.RUNNING:  # its steps' appends leave the record as it was taken
        moved = max([moved] + [e.at for _, e in entries if not isinstance(e, Exception)])
    rows += [("created", render.when(record.created_at)), ("updated", render.when(moved))]
    started = entries[0][1] if entries and entries[0][0] == 0 and not isinstance(entries[0][1], Exception) else None
    if started is not None and kind_of(started) == "started":
        rows.append(("input", render.raw_text(started.input)))
    if record.status == Status.COMPLETED:
        rows.append(("result", render.raw_text(record.result)))
    if record.error is not None:
        rows.append(("error", render.Whole(f"{record.error.type}: {record.error.message}")))
        failed = next((e for _, e in reversed(entries) if isinstance(e, Failed)), None)
        for n, frame in enumerate(failed.traceback if failed is not None and record.status == Status.FAILED else ()):
            rows.append(("traceback" if n == 0 else "", render.Whole(
                f"{frame.file}:{frame.line} in {frame.function}")))
    if not entries and record.finished:
        rows.append(("entries", "none (the journal was trimmed)"))
    return rows


@click.command()
@click.argument("invocation_id", metavar="ID")
@db_option
@json_option
@edge
def show(invocation_id: str, db: str | None, as_json: bool) -> None:
    """Show an invocation: status, input, result and every entry.

    Example:

    \b
        journal show 3f2a9c
    """
    with open_store(db) as store:
        record = require(store, invocation_id)
        if as_json:
            click.echo(render.to_json(invocation_json(store, record)))
            return
        entries = decoded(store, record.id)
        links = _links(store, record, entries)
        owner = owner_json(store, record)
    width = render.terminal_width()
    rows = _header(record, entries, links, owner)
    label_width = max(12, max(len(label) for label, _ in rows) + 2)
    for label, text in rows:
        styled = isinstance(text, render.Styled)  # the status line: short, keep its colour
        line = f"{label:<{label_width}}{text if styled else render.cut(text, width - label_width)}"
        out(render.Styled(line) if styled else line)
    if entries:
        out()
        out(_entries_table(entries, record.created_at, width))
    if record.status == Status.DIVERGED and record.divergence:
        out()
        out(record.divergence)
    elif record.status == Status.SUSPENDED and record.waiting is not None:
        wanted = promise_type(record, record.waiting)
        out()
        if wanted is not None:
            out(render.safe(f"it expects a value of type {wanted.type} for {record.waiting!r}"))
        out(f"resolve it:  {suggest(['resolve', record.id, record.waiting, render.fitting(wanted)], db)}")
        out(f"then:        {suggest(['resume', record.id], db)}")
    elif owner is not None and not owner["alive"]:
        out()
        out(f"its owner is gone; take it over with:  {suggest(['resume', record.id], db)}")
    elif record.status == Status.FAILED:
        out()
        out("after fixing the cause, run it again from before its failing step:")
        out(f"  {suggest(['retry', record.id], db)}")


def _entries_table(entries: list[tuple[int, Any]], start_us: int, width: int) -> str:
    rows = []
    for seq, entry in entries:
        if isinstance(entry, CorruptEntry):
            rows.append([str(seq), "?", "corrupt", "-", render.Whole(str(entry))])
        else:
            rows.append(render.entry_row(seq, entry, start_us=start_us))
    return render.table(render.ENTRY_HEADERS, rows, flex=(4, 3), right=(0,), width=width)


# -- tail ---------------------------------------------------------------------------------------


def tail_line(seq: int, entry: Entry | CorruptEntry, width: int) -> str:
    """One entry on one line, fixed columns, so lines printed over time stay aligned."""
    if isinstance(entry, CorruptEntry):
        at, kind, name, detail = "?", "corrupt", "-", render.Whole(str(entry))
    else:
        at, kind, name, detail = render.clock(entry.at), kind_of(entry), render.entry_name(entry), render.entry_detail(entry)
    head = f"{seq:>4}  {at:<12}  {render.cut(kind, 9):<9}  {render.cut(name, 18):<18}  "
    return head + render.cut(detail, max(width - len(head), 8))


@click.command()
@click.argument("invocation_id", metavar="ID")
@click.option("-f", "--follow", is_flag=True, help="Keep printing entries as they are appended, until the invocation ends.")
@click.option("-n", "--lines", "last", type=click.IntRange(0), default=None, help="Start with only the last N entries.")
@click.option("--after", default=None, metavar="SEQ|CURSOR",
              help="Start after entry SEQ, or after the `cursor` of the last line a follower saw (--json -f): "
                   "nothing it printed is printed again, a running step's chunks included.")
@click.option("--interval", type=click.FloatRange(0.01), default=0.1, show_default=True, hidden=True,
              help="Seconds between polls while following.")
@db_option
@json_option
@edge
def tail(invocation_id: str, follow: bool, last: int | None, after: str | None, interval: float, db: str | None,
         as_json: bool) -> None:
    """Print an invocation's entries; -f follows new ones live.

    Following works across processes: run it beside `journal run`, `resume` or a
    worker, even before it starts: -f waits for the store and the id to appear. It
    stops when the invocation completes, fails or is cancelled. With -f it
    also prints the live output of running steps (`current_step().emit(...)`) as it
    arrives, a `chunk` line each, before the step's entry. With --json each entry is one
    JSON object per line (the `show --json` entry shape), and each chunk
    `{"kind": "chunk", "seq", "attempt", "index", "data"}`; with -f each line also
    carries its `cursor`, where to go on after it.

    --after SEQ starts after entry SEQ, as a follower that was cut off goes on where it
    stopped: `journal tail ID -f --after 41`; --after CURSOR (the last line's `cursor`, or
    the id of the last event of the HTTP events stream) after that line, printing none of
    the running step's chunks it saw again.

    Example:

    \b
        journal tail 3f2a9c -f
    """
    width = render.terminal_width()
    position = _position(after)
    try:
        if follow:  # started beside `journal run ... &`: the store and the id may be on their way
            _await_store(db, interval)
        with open_store(db) as store:
            invocation_id = _await_invocation(store, invocation_id, interval) if follow else \
                require(store, invocation_id).id
            _tail(store, invocation_id, follow, last, position, interval, width, as_json)
    except KeyboardInterrupt:
        raise Exit(INTERRUPTED) from None


def _await_store(db: str | None, interval: float) -> None:
    """Return once the store exists; a name that can be no store is refused at once."""
    told = False
    path = store_path(db)
    while True:
        warn_store(path)  # raises for a name that can never be a store
        try:
            existing_store(db)
            return
        except StoreError:
            if not told:
                echo_err(f"waiting for the store {describe(path)} to be created (Ctrl-C stops)")
                told = True
        time.sleep(interval)


def _await_invocation(store: Store, text: str, interval: float) -> str:
    """The id `text` names (an id or a unique prefix) once an invocation has it."""
    told = False
    while True:
        try:
            return require(store, text).id
        except AmbiguousId:
            raise
        except InvocationNotFound:
            if not told:
                echo_err(f"waiting for invocation {text} to start (Ctrl-C stops)")
                told = True
        time.sleep(interval)


def _position(after: str | None) -> StreamPosition:
    """Where `--after` says to start: after entry SEQ, or after a cursor."""
    from runtime import StreamPosition  # here: `ls` and the other readers import no runtime

    if after is None:
        return StreamPosition()
    try:
        seq = int(after)
    except ValueError:
        try:
            return StreamPosition.parse(after, strict=True)
        except ValueError:
            raise click.BadParameter(f"{after!r} is neither an entry's seq nor a cursor a follower printed "
                                     "(`journal tail ID -f --json` gives one on every line)",
                                     param_hint="'--after'") from None
    if seq < -1:
        raise click.BadParameter(f"{seq} is no entry's seq: give 0 or more (-1: from the start)",
                                 param_hint="'--after'")
    return StreamPosition(floor=seq)


def _tail(store: Store, invocation_id: str, follow: bool, last: int | None, position: StreamPosition,
          interval: float, width: int, as_json: bool) -> None:
    """Print the entries (and with `follow`, the live output) of `invocation_id` until it ends."""
    batch = decoded(store, invocation_id, position.floor + 1)
    if last is not None:
        for seq, _ in batch[: max(len(batch) - last, 0)]:
            position.entry(seq)
        batch = batch[max(len(batch) - last, 0):]
    from journal import LiveFeed  # (only a follower needs live output)

    feed = LiveFeed.open(store, invocation_id) if follow else None
    try:
        while True:
            if feed is not None:  # a step's live output before its entry
                _print_chunks(feed.take(), position, as_json)
            ended = False
            for seq, entry in batch:
                if position.seen(seq):
                    continue
                position.entry(seq)
                if as_json:
                    shown = _entry_json(seq, entry)
                    if follow:
                        shown["cursor"] = position.text()
                    line = render.to_json(shown, pretty=False)
                else:
                    line = tail_line(seq, entry, width)
                out(line)
                ended = ended or isinstance(entry, TERMINAL_KINDS)
            sys.stdout.flush()
            if feed is None or ended:
                return
            # Woken at once by live output; the journal is read again every `interval`.
            next_read = time.monotonic() + interval
            while (left := next_read - time.monotonic()) > 0:
                feed.wait(left)
                _print_chunks(feed.take(), position, as_json)
            record = store.get(invocation_id)
            if record is None:
                raise Exit(OK, f"invocation {invocation_id} was removed (trimmed) while following it")
            # Concurrent steps may commit out of seq order: poll from the first seq not yet seen.
            batch = decoded(store, invocation_id, position.floor + 1)
    finally:
        if feed is not None:
            feed.close()


def _print_chunks(chunks: list[Chunk], position: StreamPosition, as_json: bool) -> None:
    """Live output, a line a chunk: `SEQ  TIME  chunk  attempt N  text` (escaped), or JSON;
    none the follower printed before (`--after`)."""
    chunks = [chunk for chunk in chunks if not position.chunk_seen(chunk)]
    for chunk in chunks:
        position.chunks[chunk.seq] = (chunk.epoch, chunk.attempt, chunk.index)
        if as_json:
            line: dict[str, Any] = {"kind": "chunk", "seq": chunk.seq, "attempt": chunk.attempt, "index": chunk.index}
            if isinstance(chunk.data, bytes):
                line.update(data=base64.b64encode(chunk.data).decode(), base64=True)
            else:
                line["data"] = chunk.data
            line["cursor"] = position.text()
            click.echo(render.to_json(line, pretty=False))
        else:
            text = chunk.data if isinstance(chunk.data, str) else f"<{len(chunk.data)} bytes>"
            out(f"{chunk.seq:>4}  {render.clock(time.time_ns() // 1000):<12}  {'chunk':<9}  "
                f"{'attempt ' + str(chunk.attempt):<18}  {render.safe(text)}")
    if chunks:
        sys.stdout.flush()


def _entry_json(seq: int, entry: Entry | CorruptEntry) -> dict[str, Any]:
    if isinstance(entry, CorruptEntry):
        return {"seq": seq, "kind": "corrupt", "name": None, "at": None, "error": str(entry)}
    return entry_view(entry, seq)


# -- export -------------------------------------------------------------------------------------


@click.command()
@click.argument("invocation_id", metavar="ID")
@click.option("--format", "fmt", type=click.Choice(["json", "jsonl"]), default="json", show_default=True,
              help="json: one document (as `show --json`); jsonl: one entry per line.")
@db_option
@edge
def export(invocation_id: str, fmt: str, db: str | None) -> None:
    """Write an invocation and its decoded entries as JSON.

    Example:

    \b
        journal export 3f2a9c --format jsonl > 3f2a9c.jsonl
    """
    with open_store(db) as store:
        record = require(store, invocation_id)
        if fmt == "json":
            click.echo(render.to_json(invocation_json(store, record)))
            return
        for item in export_entries(store, record.id):
            click.echo(render.to_json(item, pretty=False))
