"""Talking to a running invocation, from outside: sending messages, asking for replies,
reading published values. Every answer is read from the store, so none needs the worker
that runs the invocation (nor any worker) to be up; a wait looks again until its deadline.
`Engine.send_message`, `Engine.request`, `Engine.reply` and `Engine.get_value` are these."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, TypeVar

import anyio

from journal import InvocationRecord, PublishedValue, Send, SentMessage, decode_value, encode_value, now_us
from journal.errors import MessageNotFound, ValueNotPublished

from ..errors import TerminalError

T = TypeVar("T")
Read = Callable[..., Awaitable[Any]]
# Seconds between two looks at the store while waiting for a reply or a value: a local read
# costs microseconds; a query to a database server is a round trip for each waiting caller.
LOOK_EVERY_LOCAL, LOOK_EVERY_NETWORK = 0.005, 0.02
# A reply mostly comes within the first few looks (a worker that is up answers in
# milliseconds): until then a waiting caller looks four times as often, which takes a
# quarter of the interval off the reply's wait rather than half of it, for a few looks more.
_QUICK_FOR = 10  # intervals of LOOK_EVERY_*


class Reply(NamedTuple):
    """The answer to a request: `replied` once the handler's `message.reply(value)` is
    committed, with its `value`; until then `replied` is False and `value` None, and the
    reply can be read later by `message_id`."""

    message_id: str
    replied: bool
    value: Any = None


class Value(NamedTuple):
    """A value an invocation published (`ctx.publish`): the value, the seq of the entry that
    journaled it (greater for a later one), and when (µs since the epoch)."""

    name: str
    value: Any
    seq: int
    at: int


def time_left(deadline: int) -> float:
    return (deadline - now_us()) / 1e6


def new_message_id() -> str:
    return uuid.uuid4().hex


def send_op(invocation_id: str, topic: str, value: Any, message_id: str | None, wants_reply: bool) -> Send:
    try:
        raw = bytes(encode_value(value))
    except Exception as exc:  # an unencodable value: said before anything is sent
        raise TerminalError(f"cannot send the message on topic {topic!r}: {exc}") from None
    return Send(invocation_id, topic, message_id or new_message_id(), now_us(), raw, wants_reply)


def reply_of(message_id: str, sent: SentMessage) -> Reply:
    return Reply(message_id, True, decode_value(sent.reply)) if sent.replied else Reply(message_id, False)


async def wait_for_reply(read: Read, message: Callable[[str, str], SentMessage | None], invocation_id: str,
                         message_id: str, wait: float | None, every: float = LOOK_EVERY_NETWORK,
                         replied: Callable[[], anyio.Event] | None = None) -> Reply:
    """The reply to `message_id`, waiting up to `wait` seconds for it (None: not at all).
    `replied` gives an event set when this process commits a reply (its own worker answered):
    the next look comes then, not at the end of the interval."""
    deadline = None if wait is None else now_us() + int(max(wait, 0) * 1e6)
    quick_until = now_us() + int(every * _QUICK_FOR * 1e6)
    while True:
        woken = replied() if replied is not None else None  # (taken before the look: a reply meanwhile is seen)
        sent = await read(message, invocation_id, message_id)
        if sent is None:
            raise MessageNotFound(
                f"no message {message_id!r} was sent to invocation {invocation_id!r}; a reply is read by the "
                "message id its request gave back"
            )
        if sent.replied or deadline is None or time_left(deadline) <= 0:
            return reply_of(message_id, sent)
        pause = every / 4 if now_us() < quick_until else every
        with anyio.move_on_after(max(0.0, min(pause, time_left(deadline)))):  # (the read may have used the rest)
            if woken is None:
                await anyio.sleep_forever()
            else:
                await woken.wait()


async def read_value(read: Read, published: Callable[..., dict[str, PublishedValue]],
                     require: Callable[[str], InvocationRecord], invocation_id: str, name: str,
                     wait: float | None, after: int | None, every: float = LOOK_EVERY_NETWORK) -> Value:
    """The latest value published under `name`. With `wait`, one newer than `after` (the seq
    of a value already seen; None: the value current now), waiting up to `wait` seconds
    for it and otherwise answering the current one."""
    found = (await read(published, invocation_id, name)).get(name)
    if wait is not None:
        seen = after if after is not None else (found.seq if found is not None else 0)
        deadline = now_us() + int(max(wait, 0) * 1e6)
        while (found is None or found.seq <= seen) and time_left(deadline) > 0:
            record = await read(require, invocation_id)
            if record.finished:
                break  # nothing more will be published
            await anyio.sleep(max(0.0, min(every, time_left(deadline))))  # (the read may have used the rest)
            found = (await read(published, invocation_id, name)).get(name)
    if found is None:
        await read(require, invocation_id)  # an unknown invocation says so first
        raise ValueNotPublished(
            f"invocation {invocation_id!r} has published no value {name!r}"
            + (f" within {wait} s" if wait is not None else "")
            + "; `journal get ID` lists the names it has published"
        )
    return Value(name, decode_value(found.value), found.seq, found.at)


def values_of(published: dict[str, PublishedValue]) -> dict[str, Value]:
    return {name: Value(name, decode_value(v.value), v.seq, v.at) for name, v in sorted(published.items())}
