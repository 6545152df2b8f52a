"""Talking to a running invocation, from inside its handler: `ctx.receive`, `message.reply`
and `ctx.publish`.

A mixin of the live context (`InvocationContext`), built on its primitives. Each operation
journals one entry, and what it changes beside the journal (the message taken from the
inbox, the reply, the published value) goes in the same append (`journal.Talk`), so it is
done exactly when the entry is committed: a received message is never delivered again, a
reply or a value is never read before its entry is durable (`journal/kv/_talk.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from journal import (
    MESSAGE_WAIT,
    NIL,
    Published,
    Received,
    Replied,
    Sleep,
    Talk,
    UnencodableValue,
    encode_value,
    now_us,
    validate_id,
)
from journal.errors import InvalidId

from .._replay._suspend import Suspend
from ..errors import StepTimeout, TerminalError
from ._composition import race
from ._handlers import type_text
from ._promise_types import decode_promise_value, is_validation_error, promise_type

if TYPE_CHECKING:
    from journal import Committer, PromiseType, Store

    from .._replay._machine import Machine
    from .._replay._replayer import R

T = TypeVar("T")


class Message(Generic[T]):
    """A message `ctx.receive` returned: its `value`, its `id` (the sender's message id, or the
    one made for it), its `topic`, and whether its sender waits for a reply (`wants_reply`)."""

    __slots__ = ("_ctx", "id", "topic", "value", "wants_reply")

    def __init__(self, ctx: Talking, topic: str, message_id: str, value: T, wants_reply: bool) -> None:
        self._ctx = ctx
        self.topic = topic
        self.id = message_id
        self.value = value
        self.wants_reply = wants_reply

    async def reply(self, value: Any) -> None:
        """Answer the message (journaled): a sender that asked with `journal request`,
        `POST /invocations/{id}/requests/{topic}` or `Engine.request` gets `value` once the
        entry is committed. A message answers once; replay does not answer again."""
        await self._ctx._reply(self.id, value)

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, id={self.id!r}, value={self.value!r})"


def _checked(name: object, what: str, call: str) -> str:
    try:
        validate_id(name, what)
    except InvalidId as exc:
        raise TypeError(f"{call}: {exc}") from None
    assert isinstance(name, str)
    return name


class Talking:
    # What the context provides (see runtime/_handler/_invocation.py).
    _id: str
    _store: Store
    _committer: Committer
    _inline_sleep_limit: float
    machine: Machine

    async def _claim(self, kind: type[R], name: str | None = None, call_digest: int | None = None) -> tuple[int, int, R | None]:
        raise NotImplementedError

    async def _deliver_cancel(self, seq: int, prev: int, at: int | None = None) -> None:
        raise NotImplementedError

    async def _flush_pending(self) -> None:
        raise NotImplementedError

    async def _quiesce(self, own: int = 0) -> None:
        raise NotImplementedError

    async def _commit(self, seq: int, entry: Any, talk: Talk | None = None) -> None:
        raise NotImplementedError

    def _waker(self) -> anyio.Event:
        raise NotImplementedError

    # The highest inbox number this execution took per topic (its entry may not be committed
    # yet: a concurrent receive on the same topic takes the next message, not the same one),
    # and the topics whose type it has recorded.
    _taken: dict[str, int] | None = None
    _typed: set[str] | None = None

    async def receive(self, topic: str, *, type: Any = None, timeout: float | None = None) -> Message[Any]:
        topic = _checked(topic, "topic", "ctx.receive")
        deadline = None
        if timeout is not None:  # the deadline is a durable timer of its own, as a promise's is
            dseq, dprev, timer = await self._claim(Sleep)
            if timer is None:
                at = now_us()
                timer = Sleep(at, at + int(max(timeout, 0) * 1e6), dprev)
                await self._commit(dseq, timer)
            deadline = timer.until
        seq, prev, recorded = await self._claim(Received, topic)
        if recorded is None:
            await self._deliver_cancel(seq, prev)
            found = await self._next_message(topic, deadline)
            if found is None:
                await self._quiesce()
                found = await self._next_message(topic, None)
            typed = promise_type(MESSAGE_WAIT + topic, type)
            if found is None:
                action = self.machine.promise_wait(False, deadline, now_us())
                if action == "suspend":
                    await self._flush_pending()
                    raise Suspend(waiting=MESSAGE_WAIT + topic, wake_at=deadline,
                                  types=(typed,) if typed is not None else ())
                recorded = Received(topic, now_us(), "", NIL, prev, timed_out=True)
                await self._commit(seq, recorded)
            else:
                number, message = found
                contest = race.get()
                if contest is not None and not contest[0].take(contest[1]):
                    # Another branch of the select won by taking its own message: this one
                    # stays in the inbox for a later receive (the select cancels this branch).
                    await anyio.sleep_forever()
                taken = self._taken if self._taken is not None else {}
                self._taken = taken
                taken[topic] = max(taken.get(topic, 0), number)
                recorded = Received(topic, now_us(), message.id, message.value, prev, False, message.wants_reply)
                await self._commit(seq, recorded, Talk(received=[(topic, number)], types=self._new_type(topic, typed)))
        if recorded.timed_out:
            raise StepTimeout(f"ctx.receive({topic!r}) of invocation {self._id!r} got no message within {timeout} s")
        try:
            value = decode_promise_value(recorded.value, type)
        except Exception as exc:
            if not is_validation_error(exc):
                raise
            raise TerminalError(
                f"message {recorded.message_id!r} on topic {topic!r} of invocation {self._id!r} (seq {seq}) does not "
                f"fit type={type_text(type)}: {exc}"
            ) from None
        return Message(self, topic, recorded.message_id, value, recorded.wants_reply)

    def _new_type(self, topic: str, typed: PromiseType | None) -> list[PromiseType]:
        """The topic's type, recorded with the first typed receive of it in this execution, so
        that a send refuses a value that does not fit from then on."""
        if typed is None:
            return []
        if self._typed is None:
            self._typed = set()
        if topic in self._typed:
            return []
        self._typed.add(topic)
        return [typed]

    async def _next_message(self, topic: str, deadline: int | None) -> Any:
        """The first message on `topic` this execution has not taken; a deadline near enough is
        waited for here (looking again every 50 ms) instead of suspending."""
        after = (self._taken or {}).get(topic, 0)
        found = await self._committer.read(self._store.next_message, self._id, topic, after)
        while found is None and deadline is not None:
            left = (deadline - now_us()) / 1e6
            if left <= 0 or left > self._inline_sleep_limit:
                break
            with anyio.move_on_after(min(left, 0.05)):
                await self._waker().wait()
            self.machine.raise_if_stopped()
            if self.machine.cancel_reason is not None:
                break
            found = await self._committer.read(self._store.next_message, self._id, topic, after)
        return found

    async def _reply(self, message_id: str, value: Any) -> None:
        seq, prev, recorded = await self._claim(Replied, message_id)
        if recorded is not None:
            return
        await self._deliver_cancel(seq, prev)
        try:
            raw = encode_value(value)
        except UnencodableValue as exc:
            raise TerminalError(f"reply to message {message_id!r} at seq {seq}: {exc}") from None
        at = now_us()
        await self._commit(seq, Replied(message_id, at, raw, prev), Talk(replies=[(message_id, at, bytes(raw))]))
        self._committer.replied()  # a caller of this process waiting for it looks now

    async def publish(self, name: str, value: Any) -> None:
        name = _checked(name, "value name", "ctx.publish")
        seq, prev, recorded = await self._claim(Published, name)
        if recorded is not None:
            return
        await self._deliver_cancel(seq, prev)
        try:
            raw = encode_value(value)
        except UnencodableValue as exc:
            raise TerminalError(f"ctx.publish({name!r}) at seq {seq}: {exc}") from None
        at = now_us()
        await self._commit(seq, Published(name, at, raw, prev), Talk(published=[(name, seq, at, bytes(raw))]))
