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
    id_bytes = validate_id(op.id)
    topic = validate_id(op.topic, "topic").decode()
    message_key = id_bytes + b"\x00" + validate_id(op.message_id, "message id")
    record = _require_record(txn, id_bytes, op.id)
    known = txn.get("messages", message_key)
    if known is not None:
        sent = _sent_dec.decode(known)
        if sent.topic != topic:
            raise JournalError(
                f"message id {op.message_id!r} was already sent to invocation {op.id!r} on topic {sent.topic!r}; "
                "a message id names one message: give this one another id"
            )
        return record  # the same message sent again: delivered once
    if record.finished:
        raise MessageRefused(
            f"invocation {op.id!r} is already {record.status}: it receives no more messages, so the message on "
            f"topic {topic!r} was not sent; start a new invocation (or the next turn of its key) to talk to"
        )
    raw_type = txn.get("topics", id_bytes + b"\x00" + topic.encode())
    if raw_type is not None:
        refused = message_refusal(op.id, topic, _type_dec.decode(raw_type), op.value)
        if refused is not None:
            raise refused
    prefix = inbox_prefix(id_bytes, topic)
    last = txn.last("inbox", prefix)
    # Numbers never go back, even once the inbox is empty: the last one given is kept beside
    # the topic's message ids, and the inbox's own last key is read first.
    number = _last_number(txn, id_bytes, topic) if last is None else int.from_bytes(last[-8:], "big")
    number += 1
    txn.put("inbox", prefix + number.to_bytes(8, "big"),
            _enc.encode(InboxMessage(op.message_id, op.at, msgspec.Raw(op.value), op.wants_reply)))
    txn.put("messages", message_key, _enc.encode(SentMessage(topic, number, op.at, op.wants_reply)))
    txn.put("messages", _counter_key(id_bytes, topic), number.to_bytes(8, "big"))
    wait = MESSAGE_WAIT + topic
    if record.status == Status.SUSPENDED and (record.waiting == wait or wait in record.waiting_any):
        record = _transition(txn, id_bytes, op.id, Transition(Status.PENDING, op.at), record)
    return record


def _counter_key(id_bytes: bytes, topic: str) -> bytes:
    """Where the last number given on a topic is kept, among the invocation's message ids
    (a message id has no control character, so none begins with 0x01)."""
    return id_bytes + b"\x00\x01" + topic.encode()


def _last_number(txn: Txn, id_bytes: bytes, topic: str) -> int:
    raw = txn.get("messages", _counter_key(id_bytes, topic))
    return 0 if raw is None else int.from_bytes(raw, "big")


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
