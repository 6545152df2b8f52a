"""`Context`: the only thing a handler sees. Everything it learns from outside goes through it."""

from __future__ import annotations

import abc
import datetime
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, TypeVarTuple, overload

from ._retry import RetryPolicy

if TYPE_CHECKING:
    from typing_extensions import TypeForm  # PEP 747: `type=` takes any type expression (a union too)

    from ._memory import Memory
    from ._state import State
    from ._talk import Message

T = TypeVar("T")
U = TypeVar("U")
P = ParamSpec("P")
Ts = TypeVarTuple("Ts")


class Context(abc.ABC):
    """The handler's view of its invocation.

    Every method journals what it learns, so that replay after a crash hands the handler
    the same results without redoing the work. Operations take their seq when called, in
    program order; concurrent `ctx.run` calls (asyncio.gather, task groups) may finish in
    any order.
    """

    _journal_context = True  # how replay names a handler that returned its Context (runtime/_replay/_mistakes.py)

    @property
    @abc.abstractmethod
    def invocation_id(self) -> str:
        """The id of the invocation this handler runs."""

    state: State
    """The durable state of the invocation's key (thread): `await ctx.state.get(name)`,
    `ctx.state.set(name, value)`, `ctx.state.update(name, value, reducer=...)`,
    `ctx.state.clear(name)`, `await ctx.state.keys()`. Needs an invocation started with a key."""

    @property
    def memory(self) -> Memory:
        """Long-term memory shared across invocations and threads (namespaced items); every read
        and write is a journaled step. See `runtime._handler._memory.Memory`."""
        from ._memory import Memory

        return Memory(self)

    # For type checkers: the result is what `fn` returns (awaited if `fn` is async), or the
    # `type=` given. `fn`'s positional arguments are always checked against its signature;
    # a keyword argument only when it fills a parameter without a default (ARCHITECTURE.md).
    @overload
    async def run(
        self, name: str, fn: Callable[..., object], *args: Any, retry: RetryPolicy | None = None,
        type: TypeForm[U], timeout: float | None = None, inline: bool = False,
        limit: str | Sequence[str] | None = None, tokens: int | None = None, **kwargs: Any,
    ) -> U: ...
    @overload
    async def run(
        self, name: str, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts, retry: RetryPolicy | None = None,
        type: None = None, timeout: float | None = None, inline: bool = False,
        limit: str | Sequence[str] | None = None, tokens: int | None = None, **kwargs: Any,
    ) -> T: ...
    @overload
    async def run(
        self, name: str, fn: Callable[[*Ts], T], *args: *Ts, retry: RetryPolicy | None = None,
        type: None = None, timeout: float | None = None, inline: bool = False,
        limit: str | Sequence[str] | None = None, tokens: int | None = None, **kwargs: Any,
    ) -> T: ...
    @overload
    async def run(self, name: str, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T: ...
    @overload
    async def run(self, name: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    # mypy cannot match `*args: *Ts` with `*args: Any`, and a keyword named retry, type, limit, tokens,
    # timeout or inline is always the step's own option, never one of `fn`'s.
    @abc.abstractmethod  # type: ignore[misc]
    async def run(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        type: Any = None,
        timeout: float | None = None,
        inline: bool = False,
        limit: str | Sequence[str] | None = None,
        tokens: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run `fn(*args, **kwargs)` once as the durable step `name` and return its result.

        The result is journaled and returned as decoded from the journal (typed by `fn`'s
        return annotation or `type=`), so live and replayed runs see identical values. On
        replay `fn` is not called. A `TerminalError` fails the step at once; any other
        exception is retried by `retry` (default: 3 attempts with exponential backoff),
        then fails the step for good. Failures are journaled and raised again on replay.

        An `async def` runs on the event loop. A plain function runs on a thread of the
        engine's (`Engine(step_threads=N)`, 64 by default), so a blocking call (a synchronous
        SDK) holds up no other invocation nor the lease renewals; `inline=True` runs one
        known not to block on the loop instead, saving the hand-over (tens of µs). `timeout`
        bounds each attempt either way: a plain function still running when it passes is
        left to finish on its thread, its result dropped.

        `limit` names the store's limits (a name or a list) that each attempt acquires before it
        runs and releases when it ends (`journal limit set`); `tokens` is its estimate, reserved
        against a `--tokens` rule and settled by `current_step().used(tokens=...)`. A provider's
        push-back (`runtime.RateLimited`, an HTTP 429) pauses those limits for every process and
        runs the attempt again after it, without using up an attempt of `retry`. A replayed step
        acquires nothing.
        """

    @abc.abstractmethod
    def now(self) -> datetime.datetime:
        """The current UTC time, journaled: replay sees the same instant."""

    @abc.abstractmethod
    def random(self) -> random.Random:
        """A `random.Random` seeded from the invocation id: the same numbers on replay."""

    @abc.abstractmethod
    def uuid(self) -> uuid.UUID:
        """A deterministic UUID derived from the invocation id and a counter."""

    @abc.abstractmethod
    async def sleep(self, seconds: float) -> None:
        """A durable timer: after a restart it waits only for the time that is left."""

    @overload
    async def promise(self, name: str, *, type: TypeForm[T], timeout: float | None = None) -> T: ...
    @overload
    async def promise(self, name: str, *, type: None = None, timeout: float | None = None) -> Any: ...

    @abc.abstractmethod
    async def promise(self, name: str, *, type: Any = None, timeout: float | None = None) -> Any:
        """Wait for the value delivered to promise `name` from outside.

        Resolve it with `Engine.resolve` or `journal resolve ID NAME JSON`. While it waits the
        invocation is suspended: it holds no memory and no lease. A rejection raises
        `PromiseRejected`.
        """

    @overload
    async def receive(self, topic: str, *, type: TypeForm[T], timeout: float | None = None) -> Message[T]: ...
    @overload
    async def receive(self, topic: str, *, type: None = None, timeout: float | None = None) -> Message[Any]: ...

    @abc.abstractmethod
    async def receive(self, topic: str, *, type: Any = None, timeout: float | None = None) -> Message[Any]:
        """The next message sent to this invocation on `topic`, in arrival order, each one once.

        Send one with `Engine.send_message`, `journal send ID TOPIC JSON` or
        `POST /invocations/{id}/messages/{topic}`; a message sent before the handler asks
        waits in the invocation's inbox. What it received is journaled (replay returns the
        same messages). While none is there the invocation is suspended, holding no memory
        and no lease, and a message wakes it. With `type`, its value is decoded as that type,
        and once the handler has received the topic with it, a send of a value that does not
        fit is refused. `timeout` is a durable deadline: `StepTimeout` when it passes first.
        """

    @abc.abstractmethod
    async def publish(self, name: str, value: Any) -> None:
        """Journal `value` as the invocation's latest value under `name`: anyone reads it from
        the store (`Engine.get_value`, `journal get ID NAME`, `GET /invocations/{id}/values/{name}`)
        with no worker and none of the handler's code running."""

    @abc.abstractmethod
    async def emit(self, event: Any) -> None:
        """Journal an intermediate event (progress, a chunk of output) for `journal tail -f`."""

    @abc.abstractmethod
    async def tag(self, key: str, value: str) -> None:
        """Tag the invocation `key=value` (journaled), so that `journal ls --tag key=value` and
        `GET /invocations?tag=key:value` find it; a later value of `key` replaces the earlier.
        Set once: replay finds the tag recorded and writes nothing."""

    @abc.abstractmethod
    def patched(self, change_id: str) -> bool:
        """True on new executions, False when replaying a journal recorded before `change_id`."""

    @overload
    async def call(self, target: Callable[..., Awaitable[object]] | str, input: Any = None, *, id: str | None = None,
                   key: str | None = None, type: TypeForm[T]) -> T: ...
    @overload
    async def call(self, target: Callable[..., Awaitable[T]], input: Any = None, *, id: str | None = None,
                   key: str | None = None, type: None = None) -> T: ...
    @overload
    async def call(self, target: str, input: Any = None, *, id: str | None = None, key: str | None = None,
                   type: None = None) -> Any: ...

    @abc.abstractmethod
    async def call(self, target: Any, input: Any = None, *, id: str | None = None, key: str | None = None,
                   type: Any = None) -> Any:
        """Start handler `target` (a function or `path:function`) as a child invocation and wait for
        its result. The child's id (default `<parent id>.<seq>`) and result are journaled; a failed
        child raises `PromiseRejected`. While the child is suspended, so is the parent."""

    @abc.abstractmethod
    async def send(self, target: Any, input: Any = None, *, id: str | None = None, key: str | None = None,
                   delay: float | None = None) -> str:
        """Start a child invocation without waiting for it (after `delay` seconds); returns its id.
        It is left pending for a worker (`journal worker`) to run."""

    @abc.abstractmethod
    async def gather(self, *aws: Awaitable[T]) -> list[T]:
        """Run context operations concurrently and return their results in argument order."""

    @abc.abstractmethod
    async def select(self, *aws: Awaitable[T]) -> tuple[int, T]:
        """Run operations concurrently; return `(index, result)` of the first to finish and cancel
        the rest. The winner is journaled, so replay picks the same one."""

    @abc.abstractmethod
    def continue_as_new(self, input: Any = None) -> NoReturn:
        """End this journal and continue the same logical run as a fresh invocation with `input`
        (same key, linked both ways), so a long-lived loop keeps its replay cost bounded."""
