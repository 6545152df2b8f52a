"""Checks on requests made to an invocation from outside it: which invocation a wait
really depends on, refusing to settle by hand what a child's result settles, and whether
a cancel can roll back its state changes. They read the store and decide; the `Engine`
then writes."""

from __future__ import annotations

from journal import MESSAGE_WAIT, InvocationRecord, Promise, StateSet, Store, decode_entry
from journal.errors import CorruptEntry

from .._handler._composition import CHILD_PREFIX
from ..errors import PromiseNotFound, PromiseNotSettable, RollbackImpossible


def waiting_for(store: Store, invocation_id: str) -> InvocationRecord:
    """The invocation whose wait `invocation_id`'s depends on: itself, or the child it awaits
    with `ctx.call` (and that child's own awaited child, and so on), in its latest generation."""
    record = store.require(invocation_id)
    seen = {record.id}
    while True:
        if record.continued_as is not None:
            following = store.get(record.continued_as)
        elif record.waiting is not None and record.waiting.startswith(CHILD_PREFIX):
            following = store.get(record.waiting[len(CHILD_PREFIX):])
        else:
            return record
        if following is None or following.id in seen:
            return record
        seen.add(following.id)
        record = following


def refuse_child_promise(store: Store, invocation_id: str, name: str) -> None:
    """Raise `PromiseNotSettable` for a `child:` promise (or a `receive` wait's name), saying
    what to do instead."""
    if name.startswith(MESSAGE_WAIT):
        topic = name[len(MESSAGE_WAIT):]
        raise PromiseNotSettable(
            f"{name!r} is invocation {invocation_id!r}'s wait for a message on topic {topic!r} (ctx.receive), "
            f"not a promise: send it one with `journal send {invocation_id} {topic} JSON` "
            "(or Engine.send_message, or POST /invocations/{id}/messages/{topic})"
        )
    if not name.startswith(CHILD_PREFIX):
        return
    child_id = name[len(CHILD_PREFIX):]
    waiting = waiting_for(store, child_id) if store.get(child_id) is not None else None
    where = ""
    if waiting is not None and waiting.waiting is not None:
        where = (f" It waits for promise {waiting.waiting!r} of invocation {waiting.id!r}: resolve that one "
                 f"(`journal resolve {waiting.id} {waiting.waiting} JSON`), then `journal resume {invocation_id}` "
                 "runs the child and the parent goes on with its result.")
    elif waiting is not None and not waiting.finished:
        where = f" It is {waiting.status}: `journal resume {invocation_id}` runs it, then the parent."
    raise PromiseNotSettable(
        f"promise {name!r} of invocation {invocation_id!r} is the result of child invocation {child_id!r} "
        f"(ctx.call); it is settled only when the child finishes, never by hand.{where}"
    )


def refuse_unknown_promise(store: Store, invocation_id: str, name: str) -> None:
    """Raise `PromiseNotFound` unless the invocation waits on promise `name`, has it settled
    already (settling it again is then answered by the store), or has recorded it: a value
    sent to a name it never asks for would wait unread forever (a typo must not vanish)."""
    record = store.require(invocation_id)
    if record.finished:
        return  # the store refuses it, saying the invocation has finished (an early value could not help)
    if name == record.waiting or name in record.waiting_any or store.resolution(invocation_id, name) is not None:
        return
    for seq, data in store.entries(invocation_id):
        try:
            entry = decode_entry(data, invocation_id=invocation_id, seq=seq)
        except CorruptEntry:
            continue
        if isinstance(entry, Promise) and entry.name == name:
            return
    waits = [w for w in [record.waiting, *record.waiting_any] if w is not None and not w.startswith(CHILD_PREFIX)]
    now = f"it waits on {', '.join(map(repr, waits))}" if waits else f"it is {record.status.value}"
    raise PromiseNotFound(
        f"invocation {invocation_id!r} has no promise {name!r}: {now}, and it has not recorded {name!r}. "
        "Check the name; to deliver a value it will ask for later, resolve it with --early "
        '(over HTTP, "early": true)'
    )


def check_rollback(store: Store, invocation_id: str) -> None:
    """Raise `RollbackImpossible` if a state change was journaled without the value before it."""
    changed, known = set(), set()
    for seq, data in store.entries(invocation_id):
        entry = decode_entry(data, invocation_id=invocation_id, seq=seq)
        if isinstance(entry, StateSet):
            changed.add(entry.name)
            if entry.prior:
                known.add(entry.name)
    if changed - known:
        raise RollbackImpossible(
            f"invocation {invocation_id!r} cannot be cancelled with rollback: its changes to state "
            f"{', '.join(map(repr, sorted(changed - known)))} were journaled by a version that did not record "
            "the values before them; cancel it without rollback and set those names by hand"
        )
