"""`journal state KEY`: a thread's durable state and the queue of its unfinished invocations."""

from __future__ import annotations

import time

import click

from journal import InvocationRecord, Status, Store
from journal.views import state_json

from . import _render as render
from ._common import db_option, echo_err, edge, json_option, open_store, out, suggest


def _queued(store: Store, record: InvocationRecord | None, invocation_id: str, now_us: int) -> str:
    """`t2 (running)`; an invocation whose process died says so, since nothing else will run it."""
    if record is None:
        return f"{invocation_id} (removed)"
    return f"{invocation_id} ({_state_of(store, record, now_us)})"


def _state_of(store: Store, record: InvocationRecord, now_us: int) -> str:
    if record.status == Status.RUNNING and store.live_lease(record.id, now_us) is None:
        return "running, but its process is gone"
    if record.status == Status.SUSPENDED and record.waiting is not None:
        return f"suspended on promise {record.waiting!r}"
    return record.status.value


def unblock_hint(store: Store, head: InvocationRecord, now_us: int, db: str | None) -> str | None:
    """What to do when the invocation at the head of the queue is one that nobody is running."""
    if head.status == Status.RUNNING and store.live_lease(head.id, now_us) is not None:
        return None
    if head.status == Status.SUSPENDED:
        if head.waiting is None:
            return f"the queue waits for {head.id}, suspended on a durable timer; `journal worker` continues it"
        if head.waiting.startswith("child:"):  # settled by the child's result, never by hand
            return (f"the queue waits for {head.id}, suspended in ctx.call on child invocation "
                    f"{head.waiting[len('child:'):]}; {suggest(['resume', head.id], db)} runs the child and says "
                    "what it waits for")
        return (f"the queue waits for {head.id}, suspended on promise {head.waiting!r}; "
                f"{suggest(['resolve', head.id, head.waiting, 'JSON'], db)} then {suggest(['resume', head.id], db)}")
    gone = " (its process is gone)" if head.status == Status.RUNNING else f" ({head.status.value})"
    return f"the queue waits for {head.id}{gone}; continue it with: {suggest(['resume', head.id], db)}"


@click.command()
@click.argument("key")
@db_option
@json_option
@edge
def state(key: str, db: str | None, as_json: bool) -> None:
    """Show a key's durable state and its queue of unfinished invocations.

    Invocations run with the same --key form a thread: they run one at a time, in
    arrival order (the queue), and share the state their handlers read and change
    with ctx.state. Each name is shown with its decoded value. A key that no
    invocation was run with has an empty state and an empty queue (exit status 0).

    Example:

    \b
        journal state thread-42 --json
    """
    with open_store(db) as store:
        values = store.state(key)
        queue = store.key_queue(key)
        if as_json:
            click.echo(render.to_json(state_json(key, values, queue)))
            return
        now = time.time_ns() // 1000
        records = [store.get(i) for i in queue]
        queued = [_queued(store, r, i, now) for r, i in zip(records, queue, strict=False)]
        hint = unblock_hint(store, records[0], now, db) if records and records[0] is not None else None
        known = bool(values or queue) or any(r.key == key for r in store.list())
    if not known:
        echo_err(f"no invocation in this store was run with key {key!r}; its state is empty")
        return
    width = render.terminal_width()
    out(f"{'key':<7}{render.cut(key, width - 7)}")
    out(f"{'queue':<7}{render.cut(', '.join(queued) or 'empty (no invocation of this key is unfinished)', width - 7)}")
    out()
    if values:
        rows = [[name, render.size(len(raw)), render.raw_text(raw)] for name, raw in values.items()]
        out(render.table(("NAME", "SIZE", "VALUE"), rows, flex=(2, 0), right=(1,), width=width))
    else:
        out("no state: no handler of this key has set a name")
    if hint is not None:
        echo_err(hint)
