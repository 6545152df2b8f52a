"""The rules of talking to a running invocation: its inbox, replies, and published values.

A message sent on a topic goes into the invocation's inbox under the next number of that
topic (arrival order) and its id into `messages`, where a second send of the same id finds
it and changes nothing. `ctx.receive` takes the first message of its topic, and the
transaction that journals the `received` entry deletes it from the inbox (`Talk.received`):
so a message received is never delivered again, and one not yet received is still there
after any crash. A reply (`Talk.replies`) and a published value (`Talk.published`) are
written in the transaction of the entry that journals them, so nobody reads either before
that entry is committed.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .._ids import validate_id
from .._records import MESSAGE_WAIT, InboxMessage, InvocationRecord, PromiseType, PublishedValue, SentMessage, Status
from .._schema import message_refusal
from .._store import Send, Talk, Transition
from ..errors import JournalError, MessageRefused
from ._rules import Txn, _enc, _require_record, _transition, inbox_prefix

_inbox_dec = msgspec.msgpack.Decoder(InboxMessage)
_sent_dec = msgspec.msgpack.Decoder(SentMessage)
_published_dec = msgspec.msgpack.Decoder(PublishedValue)
_type_dec = msgspec.msgpack.Decoder(PromiseType)


def apply_send(txn: Txn, op: Send) -> InvocationRecord:
    (result,) = apply_sends(txn, [op])
    if isinstance(result, BaseException):
        raise result
    return result


def apply_sends(txn: Txn, ops: Sequence[Send]) -> list[InvocationRecord | BaseException]:
    """The send rule for consecutive sends of one transaction, each as if it came alone after
    the one before it (its result: the record, or the error that refused it). What they
    share is read once, not once a send: each invocation's record and each topic's type, and
    the message ids with each topic's last number in one `get_many`; their rows go in one
    `put_many` per table. On a database that is a few statements for a batch of a hundred sends instead
    of eight a send (what the group commit gathers from many concurrent senders)."""
    results: list[InvocationRecord | BaseException | None] = [None] * len(ops)
    checked: list[tuple[int, Send, bytes, str, bytes]] = []
    for n, op in enumerate(ops):
        try:
            id_bytes = validate_id(op.id)
            topic = validate_id(op.topic, "topic").decode()
            checked.append((n, op, id_bytes, topic, id_bytes + b"\x00" + validate_id(op.message_id, "message id")))
        except JournalError as exc:
            results[n] = exc
    # Each record first (on PostgreSQL this locks its row: concurrent sends to one
    # invocation take turns from here), in id order so that two batches never wait on each
    # other; then the ids already sent, which nobody can add meanwhile.
    records: dict[bytes, InvocationRecord | JournalError] = {}
    for id_bytes, invocation_id in sorted({(c[2], c[1].id) for c in checked}):
        try:
            records[id_bytes] = _require_record(txn, id_bytes, invocation_id)
        except JournalError as exc:
            records[id_bytes] = exc
    # The message ids and each topic's last number given, in one read.
    live = [c for c in checked if not isinstance(records[c[2]], JournalError)]
    counters = {(c[2], c[3]): _counter_key(c[2], c[3]) for c in live}
    asked = list(dict.fromkeys([c[4] for c in live] + list(counters.values())))
    got = dict(zip(asked, txn.get_many("messages", asked), strict=True))
    known: dict[bytes, str] = {}  # message key -> its topic, sent before or earlier in this run
    for _, _, _, _, key in live:
        raw = got[key]
        if raw is not None and key not in known:
            known[key] = _sent_dec.decode(raw).topic
    types: dict[tuple[bytes, str], PromiseType | None] = {}
    numbers: dict[tuple[bytes, str], int] = {}  # the last number given on a topic
    given: set[tuple[bytes, str]] = set()  # the topics this run gave a number on
    inbox: list[tuple[bytes, bytes]] = []
    sent: list[tuple[bytes, bytes]] = []
    for n, op, id_bytes, topic, message_key in checked:
        record = records[id_bytes]
        if isinstance(record, JournalError):
            results[n] = record
            continue
        if message_key in known:
            if known[message_key] != topic:
                results[n] = JournalError(
                    f"message id {op.message_id!r} was already sent to invocation {op.id!r} on topic "
                    f"{known[message_key]!r}; a message id names one message: give this one another id"
                )
            else:
                results[n] = record  # the same message sent again: delivered once
            continue
        if record.finished:
            results[n] = MessageRefused(
                f"invocation {op.id!r} is already {record.status}: it receives no more messages, so the message on "
                f"topic {topic!r} was not sent; start a new invocation (or the next turn of its key) to talk to"
            )
            continue
        at = (id_bytes, topic)
        if at not in types:
            raw_type = txn.get("topics", id_bytes + b"\x00" + topic.encode())
            types[at] = None if raw_type is None else _type_dec.decode(raw_type)
        typed = types[at]
        if typed is not None:
            refused = message_refusal(op.id, topic, typed, op.value)
            if refused is not None:
                results[n] = refused
                continue
        if at not in numbers:
            # Numbers never go back, even once the inbox is empty: the last one given is kept
            # beside the topic's message ids (written with every send since the inbox has
            # been, so never behind its last key); without it, the inbox's last key.
            counter = got[counters[at]]
            if counter is not None:
                numbers[at] = int.from_bytes(counter, "big")
            else:
                last = txn.last("inbox", inbox_prefix(id_bytes, topic))
                numbers[at] = 0 if last is None else int.from_bytes(last[-8:], "big")
        number = numbers[at] = numbers[at] + 1
        given.add(at)
        inbox.append((inbox_prefix(id_bytes, topic) + number.to_bytes(8, "big"),
                      _enc.encode(InboxMessage(op.message_id, op.at, msgspec.Raw(op.value), op.wants_reply))))
        sent.append((message_key, _enc.encode(SentMessage(topic, number, op.at, op.wants_reply))))
        known[message_key] = topic
        wait = MESSAGE_WAIT + topic
        if record.status == Status.SUSPENDED and (record.waiting == wait or wait in record.waiting_any):
            # A copy changes: the sends before this one answered the record as it was then.
            record = records[id_bytes] = _transition(
                txn, id_bytes, op.id, Transition(Status.PENDING, op.at), msgspec.structs.replace(record))
        results[n] = record
    if inbox:
        txn.put_many("inbox", inbox)
        txn.put_many("messages", sent + [(_counter_key(*at), numbers[at].to_bytes(8, "big")) for at in given])
    return results  # type: ignore[return-value]  # every position was filled above


def _counter_key(id_bytes: bytes, topic: str) -> bytes:
    """Where the last number given on a topic is kept, among the invocation's message ids
    (a message id has no control character, so none begins with 0x01)."""
    return id_bytes + b"\x00\x01" + topic.encode()


def apply_talk(txn: Txn, id_bytes: bytes, talk: Talk) -> None:
    """What an append's entries about messages and values change beside the journal."""
    for topic, number in talk.received:
        txn.delete("inbox", inbox_prefix(id_bytes, topic) + number.to_bytes(8, "big"))
    for message_id, at, raw in talk.replies:
        key = id_bytes + b"\x00" + message_id.encode()
        known = txn.get("messages", key)
        if known is None:
            continue  # (deleted with a trimmed invocation's rows: nobody can ask for it)
        sent = _sent_dec.decode(known)
        sent.replied, sent.reply, sent.replied_at = True, msgspec.Raw(raw), at
        txn.put("messages", key, _enc.encode(sent))
    for typed in talk.types:
        txn.put("topics", id_bytes + b"\x00" + typed.name[len(MESSAGE_WAIT):].encode(), _enc.encode(typed))
    for name, seq, at, raw in talk.published:
        txn.put("published", id_bytes + b"\x00" + name.encode(), _enc.encode(PublishedValue(seq, at, msgspec.Raw(raw))))


def next_message(txn: Txn, id_bytes: bytes, topic: str, after: int) -> tuple[int, InboxMessage] | None:
    prefix = inbox_prefix(id_bytes, topic)
    for key, raw in txn.scan_some("inbox", prefix, prefix + (after + 1).to_bytes(8, "big"), 1):
        return int.from_bytes(key[-8:], "big"), _inbox_dec.decode(raw)
    return None


def sent_message(txn: Txn, id_bytes: bytes, message_id: str) -> SentMessage | None:
    raw = txn.get("messages", id_bytes + b"\x00" + validate_id(message_id, "message id"))
    return None if raw is None else _sent_dec.decode(raw)


def published(txn: Txn, id_bytes: bytes, name: str | None) -> dict[str, PublishedValue]:
    if name is not None:
        raw = txn.get("published", id_bytes + b"\x00" + validate_id(name, "value name"))
        return {} if raw is None else {name: _published_dec.decode(raw)}
    prefix = id_bytes + b"\x00"
    return {key[len(prefix):].decode(): _published_dec.decode(raw) for key, raw in txn.scan("published", prefix)}
