"""The rules of talking to a running invocation (the inbox, replies, published values), as
pytest tests: a part of `StoreContract`, which every backend passes."""

from __future__ import annotations

from typing import Any

import pytest

from .. import (
    MESSAGE_WAIT,
    Append,
    InvocationRecord,
    PromiseType,
    Published,
    Received,
    Replied,
    Send,
    SetStatus,
    Status,
    Talk,
    Transition,
    decode_value,
    encode_entry,
    encode_value,
)
from ..errors import InvalidId, InvocationNotFound, LeaseLost, MessageRefused, MessageValueRefused
from ._builders import T0, acquire, create


def _send(store: Any, topic: str, value: Any, message_id: str, invocation_id: str = "inv-1", *,
          wants_reply: bool = False) -> Any:
    return store.apply_one(Send(invocation_id, topic, message_id, T0, bytes(encode_value(value)), wants_reply))


def _inbox(store: Any, topic: str, invocation_id: str = "inv-1") -> list[tuple[int, str, Any]]:
    out, after = [], 0
    while (found := store.next_message(invocation_id, topic, after)) is not None:
        number, message = found
        out.append((number, message.id, decode_value(message.value)))
        after = number
    return out


def _receive(store: Any, epoch: int, seq: int, topic: str, number: int, message_id: str) -> Any:
    entry = encode_entry(Received(topic, T0, message_id, encode_value("x")))
    return store.apply_one(Append("inv-1", epoch, [(seq, entry)], talk=Talk(received=[(topic, number)])))


class TalkRules:
    """Part of `StoreContract`: the inbox, replies and published values."""

    def test_messages_wait_in_the_inbox_per_topic_in_arrival_order(self, store: Any) -> None:
        create(store)
        for i in range(3):
            _send(store, "chat", f"m{i}", f"id-{i}")
        _send(store, "other", "o", "id-o")
        assert _inbox(store, "chat") == [(1, "id-0", "m0"), (2, "id-1", "m1"), (3, "id-2", "m2")]
        assert _inbox(store, "other") == [(1, "id-o", "o")]
        assert store.next_message("inv-1", "chat", 3) is None
        assert store.next_message("inv-1", "nothing") is None

    def test_the_same_message_id_is_delivered_once(self, store: Any) -> None:
        create(store)
        _send(store, "chat", "first", "m-1")
        _send(store, "chat", "retried", "m-1")  # a retried send: nothing new
        assert _inbox(store, "chat") == [(1, "m-1", "first")]
        with pytest.raises(Exception, match="already sent .* on topic 'chat'"):
            _send(store, "other", "x", "m-1")

    def test_a_message_received_leaves_the_inbox_in_the_transaction_that_journals_it(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        _send(store, "chat", "a", "m-a")
        _send(store, "chat", "b", "m-b")
        _receive(store, epoch, 1, "chat", 1, "m-a")
        assert _inbox(store, "chat") == [(2, "m-b", "b")]
        assert [seq for seq, _ in store.entries("inv-1")] == [0, 1]
        # A stale owner's receive takes nothing: the message stays for the one that owns it.
        epoch2, _ = acquire(store, owner="other", host="elsewhere", now=T0 + 60_000_000)
        with pytest.raises(LeaseLost):
            _receive(store, epoch, 2, "chat", 2, "m-b")
        assert _inbox(store, "chat") == [(2, "m-b", "b")]
        # The same id sent again after it was received is not delivered a second time.
        _send(store, "chat", "a", "m-a")
        assert _inbox(store, "chat") == [(2, "m-b", "b")]
        # Numbers never go back once the inbox empties.
        _receive(store, epoch2, 2, "chat", 2, "m-b")
        _send(store, "chat", "c", "m-c")
        assert _inbox(store, "chat") == [(3, "m-c", "c")]

    def test_a_message_wakes_an_invocation_suspended_in_receive_and_one_sent_first_is_not_lost(
            self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        wait = MESSAGE_WAIT + "chat"
        record = store.apply_one(SetStatus("inv-1", Transition(Status.SUSPENDED, T0, waiting=wait, release=True), epoch))
        assert record.status == Status.SUSPENDED
        _send(store, "other", "not this topic", "m-0")
        assert store.require("inv-1").status == Status.SUSPENDED
        assert _send(store, "chat", "hi", "m-1").status == Status.PENDING
        # Sent while it ran, before it suspended: it does not suspend.
        epoch, _ = acquire(store, now=T0 + 1)
        record = store.apply_one(SetStatus("inv-1", Transition(Status.SUSPENDED, T0 + 2, waiting=wait, release=True),
                                           epoch))
        assert record.status == Status.PENDING

    def test_a_typed_topic_refuses_a_value_that_does_not_fit_and_the_invocation_goes_on(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        typed = PromiseType(MESSAGE_WAIT + "n", "int", '{"type": "integer"}')
        store.apply_one(SetStatus("inv-1", Transition(
            Status.SUSPENDED, T0, waiting=MESSAGE_WAIT + "n", release=True, promise_types=[typed]), epoch))
        with pytest.raises(MessageValueRefused, match="receives topic 'n' as int"):
            _send(store, "n", "seven", "m-1")
        assert store.require("inv-1").status == Status.SUSPENDED and _inbox(store, "n") == []
        assert _send(store, "n", 7, "m-2").status == Status.PENDING
        # The type stays declared while it runs, as it does when a receive declares it without waiting.
        with pytest.raises(MessageValueRefused):
            _send(store, "n", "eight", "m-3")
        store.apply_one(Append("inv-1", acquire(store, now=T0 + 5)[0], [], talk=Talk(
            types=[PromiseType(MESSAGE_WAIT + "s", "str", '{"type": "string"}')])))
        with pytest.raises(MessageValueRefused):
            _send(store, "s", 1, "m-4")

    def test_a_finished_invocation_refuses_every_message(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        store.apply_one(SetStatus("inv-1", Transition(Status.COMPLETED, T0, result=encode_value(1), release=True),
                                  epoch))
        with pytest.raises(MessageRefused, match="already completed"):
            _send(store, "chat", "late", "m-1")
        assert _inbox(store, "chat") == []

    def test_a_send_to_an_unknown_invocation_or_with_a_bad_topic_says_so(self, store: Any) -> None:
        with pytest.raises(Exception, match="no invocation 'ghost'"):
            _send(store, "chat", "x", "m", "ghost")
        create(store)
        with pytest.raises(InvalidId, match="topic"):
            _send(store, "bad\x00topic", "x", "m")

    def test_sends_committed_together_land_as_if_one_after_another(self, store: Any) -> None:
        # What the group commit makes of many senders at once: one `apply` of many sends.
        create(store)
        create(store, "inv-2")
        epoch, _ = acquire(store)
        typed = PromiseType(MESSAGE_WAIT + "n", "int", '{"type": "integer"}')
        store.apply_one(SetStatus("inv-1", Transition(Status.SUSPENDED, T0, waiting=MESSAGE_WAIT + "chat",
                                                      release=True, promise_types=[typed]), epoch))

        def send(topic: str, value: Any, message_id: str, invocation_id: str = "inv-1") -> Send:
            return Send(invocation_id, topic, message_id, T0, bytes(encode_value(value)))

        results = store.apply([
            send("other", "o", "m-0"),  # not what it waits for
            send("chat", "a", "m-1"),  # wakes it
            send("chat", "a again", "m-1"),  # the same message: nothing new
            send("other", "x", "m-1"),  # that id names the message on `chat`
            send("n", "seven", "m-2"),  # does not fit the topic's type
            send("n", 7, "m-3"),
            send("chat", "x", "m-9", "ghost"),
            send("bad\x00topic", "x", "m-8"),
            send("chat", "to the other", "m-1", "inv-2"),  # message ids are per invocation
            send("chat", "b", "m-4"),
        ])
        assert [r.status if isinstance(r, InvocationRecord) else None for r in results] == [
            Status.SUSPENDED, Status.PENDING, Status.PENDING, None, None, Status.PENDING, None, None,
            Status.PENDING, Status.PENDING]
        assert "already sent" in str(results[3]) and isinstance(results[4], MessageValueRefused)
        assert isinstance(results[6], InvocationNotFound) and isinstance(results[7], InvalidId)
        assert _inbox(store, "chat") == [(1, "m-1", "a"), (2, "m-4", "b")]
        assert _inbox(store, "other") == [(1, "m-0", "o")] and _inbox(store, "n") == [(1, "m-3", 7)]
        assert _inbox(store, "chat", "inv-2") == [(1, "m-1", "to the other")]
        assert store.require("inv-1").status == Status.PENDING
        _send(store, "chat", "c", "m-5")  # numbers go on from the batch's
        assert _inbox(store, "chat")[-1] == (3, "m-5", "c")
        assert store.message("inv-1", "m-4") is not None and store.message("inv-1", "m-2") is None

    def test_a_reply_is_read_once_its_entry_is_committed(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        _send(store, "ask", "status?", "q-1", wants_reply=True)
        sent = store.message("inv-1", "q-1")
        assert sent is not None and sent.wants_reply and not sent.replied and sent.topic == "ask"
        reply = encode_value({"ok": True})
        store.apply_one(Append("inv-1", epoch, [(1, encode_entry(Replied("q-1", T0, reply)))],
                               talk=Talk(replies=[("q-1", T0, bytes(reply))])))
        sent = store.message("inv-1", "q-1")
        assert sent is not None and sent.replied and decode_value(sent.reply) == {"ok": True}
        assert store.message("inv-1", "never-sent") is None

    def test_the_latest_published_value_is_read_by_name(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        for seq, value in ((1, 10), (2, 20)):
            raw = encode_value(value)
            store.apply_one(Append("inv-1", epoch, [(seq, encode_entry(Published("progress", T0 + seq, raw)))],
                                   talk=Talk(published=[("progress", seq, T0 + seq, bytes(raw))])))
        raw = encode_value("x")
        store.apply_one(Append("inv-1", epoch, [(3, encode_entry(Published("phase", T0, raw)))],
                               talk=Talk(published=[("phase", 3, T0, bytes(raw))])))
        latest = store.published("inv-1", "progress")["progress"]
        assert decode_value(latest.value) == 20 and latest.seq == 2
        assert sorted(store.published("inv-1")) == ["phase", "progress"]
        assert store.published("inv-1", "missing") == {}

    def test_deleting_an_invocation_removes_its_inbox_replies_and_values(self, store: Any) -> None:
        create(store)
        epoch, _ = acquire(store)
        _send(store, "chat", "x", "m-1")
        raw = encode_value(1)
        store.apply_one(Append("inv-1", epoch, [(1, encode_entry(Published("p", T0, raw)))],
                               talk=Talk(published=[("p", 1, T0, bytes(raw))])))
        store.delete(["inv-1"])
        create(store)  # the same id again starts from nothing
        assert _inbox(store, "chat") == [] and store.message("inv-1", "m-1") is None
        assert store.published("inv-1") == {}
