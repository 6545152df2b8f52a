"""Operations that compose others: child invocations, gather, select, continue-as-new.

A mixin of the live context (`InvocationContext`), kept apart because each of these is
built from the context's primitive operations rather than being one itself. It uses only
the primitives declared in `Composition` below, so it does not import the context.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NoReturn

import anyio

from journal import Called, Selected, digest, now_us

from .._replay._groups import leaves
from .._replay._suspend import ContinueAsNew, Suspend

if TYPE_CHECKING:
    from .._replay._machine import Machine
    from .._replay._replayer import R


CHILD_PREFIX = "child:"  # the promise a parent awaits in ctx.call: settled when the child finishes


class _Fence:
    __slots__ = ("parked",)

    def __init__(self) -> None:
        self.parked = anyio.Event()


_fence: ContextVar[_Fence | None] = ContextVar("journal_select_fence", default=None)


class Race:
    """The branches of one live `ctx.select`: the one that took something that cannot be given
    back (a message from the inbox, `ctx.receive`) is the winner, so that no other branch
    takes such a thing too, and none finishing meanwhile wins instead of it."""

    __slots__ = ("taken",)

    def __init__(self) -> None:
        self.taken: int | None = None

    def take(self, index: int) -> bool:
        """Whether branch `index` may take (and so wins); False once another branch took."""
        if self.taken is None:
            self.taken = index
        return self.taken == index


# The select branch the calling task runs in: `(its race, its index)`.
race: ContextVar[tuple[Race, int] | None] = ContextVar("journal_select_race", default=None)


def _first_error(group: BaseExceptionGroup) -> BaseException:
    """The first error in a branch group that is not the cancellation the others got because of it."""
    found = leaves(group)
    return next((e for e in found if not isinstance(e, anyio.get_cancelled_exc_class())), found[0])


class Composition:
    # What the context provides (see runtime/_handler/_invocation.py).
    _id: str
    _spawner: Any
    machine: Machine

    async def _claim(self, kind: type[R], name: str | None = None, call_digest: int | None = None) -> tuple[int, int, R | None]:
        raise NotImplementedError

    async def _deliver_cancel(self, seq: int, prev: int, at: int | None = None) -> None:
        raise NotImplementedError

    async def _flush_pending(self) -> None:
        raise NotImplementedError

    async def _commit(self, seq: int, entry: Any) -> None:
        raise NotImplementedError

    async def promise(self, name: str, *, type: Any = None, timeout: float | None = None) -> Any:
        raise NotImplementedError

    async def call(self, target: Any, input: Any = None, *, id: str | None = None, key: str | None = None,
                   type: Any = None) -> Any:
        child_id = await self._start_child(target, input, id=id, key=key, awaited=True, delay=None)
        await self._spawner.run_child(child_id)
        return await self.promise(CHILD_PREFIX + child_id, type=type)

    async def send(self, target: Any, input: Any = None, *, id: str | None = None, key: str | None = None,
                   delay: float | None = None) -> str:
        return await self._start_child(target, input, id=id, key=key, awaited=False, delay=delay)

    async def _start_child(self, target: Any, input: Any, *, id: str | None, key: str | None, awaited: bool,
                           delay: float | None) -> str:
        path, raw = self._spawner.child_input(target, input)
        seq, prev, recorded = await self._claim(Called, path, digest(path, bytes(raw), id, key, awaited))
        if recorded is not None:
            return recorded.child
        await self._deliver_cancel(seq, prev)
        await self._flush_pending()
        child_id = id if id is not None else f"{self._id}.{seq}"
        await self._spawner.create_child(self._id, path, raw, child_id, key, delay)
        await self._commit(seq, Called(path, digest(path, bytes(raw), id, key, awaited), now_us(), child_id,
                                       awaited, prev))
        return child_id

    async def gather(self, *aws: Any) -> list[Any]:
        results: list[Any] = [None] * len(aws)
        point = self.machine.fork_point()

        async def one(i: int, aw: Any) -> None:
            self.machine.enter_branch(point, i)
            results[i] = await aw

        try:
            async with anyio.create_task_group() as tg:
                for i, aw in enumerate(aws):
                    tg.start_soon(one, i, aw)
        except BaseExceptionGroup as group:
            raise _first_error(group) from None
        return results

    async def select(self, *aws: Any) -> tuple[int, Any]:
        if not aws:
            raise TypeError("ctx.select needs at least one awaitable")
        seq, prev, recorded = await self._claim(Selected)
        winner_index = recorded.index if recorded is not None else None
        done = anyio.Event()
        outcome: dict[str, Any] = {}
        fences = [_Fence() for _ in aws]
        waits: list[Suspend] = []  # branches that must wait (unresolved promises, long timers)
        settled = [0]
        point = self.machine.fork_point()

        contest = Race()

        def wins(i: int) -> bool:
            return "index" not in outcome and (winner_index is None or i == winner_index) and contest.taken in (None, i)

        async def branch(i: int, aw: Any) -> None:
            self.machine.enter_branch(point, i)
            token = _fence.set(fences[i] if winner_index is not None and i != winner_index else None)
            racing = race.set((contest, i))
            try:
                value = await aw
                if wins(i):
                    outcome.update(index=i, value=value)
                    done.set()
            except Exception as exc:
                if wins(i):
                    outcome.update(index=i, error=exc)
                    done.set()
            except Suspend as exc:
                # Held back: the invocation waits only if no branch wins, and then on all of
                # the branches' promises and timers at once.
                waits.append(exc)
            finally:
                fences[i].parked.set()
                _fence.reset(token)
                race.reset(racing)
                settled[0] += 1
                if settled[0] == len(aws):
                    done.set()

        async with anyio.create_task_group() as tg:
            for i, aw in enumerate(aws):
                tg.start_soon(branch, i, aw)
            await done.wait()
            if winner_index is not None:  # replay: let the losers claim what they journaled first
                for i, fence in enumerate(fences):
                    if i != winner_index:
                        await fence.parked.wait()
            tg.cancel_scope.cancel()
        if "index" not in outcome:
            names = list(dict.fromkeys(name for wait in waits for name in wait.names()))
            wakes = [wait.wake_at for wait in waits if wait.wake_at is not None]
            raise Suspend(names[0] if names else None, min(wakes, default=None), tuple(names[1:]),
                          tuple(t for wait in waits for t in wait.types))
        if recorded is None:
            await self._commit(seq, Selected(now_us(), outcome["index"], prev))
        if "error" in outcome:
            raise outcome["error"]
        return outcome["index"], outcome["value"]

    def continue_as_new(self, input: Any = None) -> NoReturn:
        raise ContinueAsNew(input)


