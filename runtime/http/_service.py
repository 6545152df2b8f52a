"""What the routes share: the engine, the handlers a request may name, and the store reads."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from starlette.requests import Request

from journal.errors import InvocationBusy, JournalError, LeaseLost

from .. import Engine
from ..hooks import Observer, StepEvent
from ._errors import ApiError
from ._request_checks import DEFAULT_MAX_BODY, checked_id

if TYPE_CHECKING:
    from journal import LiveFeed

T = TypeVar("T")
_REMEMBERED = 10_000
_log = logging.getLogger("journal")


class StepCounts(Observer):
    """The steps this process ran live or replayed, per invocation (the UI shows replays),
    for the most recent invocations; and how many its latest run replayed before going live
    (replay feeds the recorded steps first, in program order: the UI marks that many)."""

    def __init__(self) -> None:
        # id -> [live, replayed, replayed by the latest run, whether that run went live yet]
        self._steps: OrderedDict[str, list[int]] = OrderedDict()

    def step(self, event: StepEvent) -> None:
        counts = self._steps.pop(event.invocation_id, None) or [0, 0, 0, 0]
        replayed = event.how == "replayed"
        counts[replayed] += 1
        if replayed:
            if counts[3]:  # a replay after live steps: another run began
                counts[2], counts[3] = 0, 0
            counts[2] += 1
        else:
            counts[3] = 1
        self._steps[event.invocation_id] = counts
        if len(self._steps) > _REMEMBERED:
            self._steps.popitem(last=False)

    def of(self, invocation_id: str) -> dict[str, int] | None:
        counts = self._steps.get(invocation_id)
        return None if counts is None else {"live": counts[0], "replayed": counts[1], "replayed_latest": counts[2]}


class Service:
    """What the routes share: the engine, the handlers a request may name, and the guards."""

    def __init__(self, engine: Engine, handlers: dict[str, Callable[..., Any]], *, token: str | None = None,
                 max_body: int = DEFAULT_MAX_BODY, workers: int = 0, poll: float = 0.05) -> None:
        self.engine = engine
        self.store = engine.store
        self.handlers = handlers
        self.token = token.encode() if token else None
        self.max_body = max_body
        self.workers = workers
        self.poll = poll
        # Set when the server stops: long polls and event streams end instead of holding it up.
        self.stopping = anyio.Event()
        self.counts = StepCounts()  # an observer of `engine` (`create_app` adds it)
        self.metrics: Any = None  # runtime.metrics.Metrics, observing `engine`, with the metrics extra
        self.openapi: dict[str, Any] = {}  # the document of the app's routes (`create_app` collects it)

    def steps_here(self, invocation_id: str) -> dict[str, int] | None:
        return self.counts.of(invocation_id)

    async def pause(self, feed: LiveFeed | None = None, timeout: float | None = None) -> bool:
        """Wait one poll interval (or `timeout`), or until live output arrives on `feed`; False once
        the server is stopping."""
        if feed is None:
            with anyio.move_on_after(self.poll):
                await self.stopping.wait()
            return not self.stopping.is_set()
        async with anyio.create_task_group() as tg:

            async def stop() -> None:
                await self.stopping.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(stop)
            await feed.wait_async(self.poll if timeout is None else timeout)
            tg.cancel_scope.cancel()
        return not self.stopping.is_set()

    async def run_here(self, invocation_id: str) -> None:
        """Run the invocation in this server (replay, then live) until it ends or suspends, or
        until the server stops: then it gives its lease back and stays pending, as a worker's do."""
        async with anyio.create_task_group() as tg:

            async def stop() -> None:
                await self.stopping.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(stop)
            try:
                await self.engine.resume(invocation_id)
            except (InvocationBusy, LeaseLost):
                pass  # a worker took it meanwhile: it runs there
            except JournalError as exc:  # what it ran into is in its record; the server goes on
                _log.warning("running %s here stopped: %s", invocation_id, exc)
            tg.cancel_scope.cancel()

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, which reads the store: off the event loop when the store waits on the
        network (PostgreSQL), so one slow query never holds up the other requests and the workers."""
        return await self.engine.committer.read(fn, *args)

    async def require(self, invocation_id: str) -> Any:
        record = await self.read(self.store.get, checked_id(invocation_id))
        if record is None:
            raise ApiError(404, "InvocationNotFound", f"no invocation {invocation_id!r}; GET /invocations lists them")
        return record


def service(request: Request) -> Service:
    """The `Service` of the application serving `request`."""
    found: Service = request.app.state.service
    return found
