"""The append path, one entry at a time, beside a raw LMDB put+commit in the same session.

`async` group: nothing waits for the disk, so this is the cost of the journal's own work
(epoch check, append-only check, keys, transaction) over LMDB's. `sync` group: each
append waits for its fsync; one appender cannot share an fsync with anybody.
"""

from __future__ import annotations

import itertools

import pytest

from journal import Append, Committer
from journal.kv import KVStore
from runtime import Engine

from . import _agents
from ._raw import STEP_BYTES
from ._workloads import _open_invocations

ASYNC_OPS = 1000  # appends per round without fsync
SYNC_OPS = 50  # appends per round with an fsync each
ROUNDS_ASYNC = 20
ROUNDS_SYNC = 8

ASYNC = "append, async (commit, no fsync)"
SYNC = "append, sync (commit + fsync)"


class Appender:
    """One owned invocation and a seq counter that carries on across rounds."""

    def __init__(self, store, mode: str, portal) -> None:
        self.store = store
        ((self.id, self.epoch),) = _open_invocations(store, 1)
        self.committer = portal.call(lambda: Committer(store, mode))
        self.seqs = itertools.count(1)

    async def submit(self, n: int) -> None:
        for _ in range(n):
            await self.committer.submit(Append(self.id, self.epoch, [(next(self.seqs), STEP_BYTES)]))

    def apply(self, n: int) -> None:
        for _ in range(n):
            (result,) = self.store.apply([Append(self.id, self.epoch, [(next(self.seqs), STEP_BYTES)])])
            assert result is None, result


@pytest.mark.benchmark(group=ASYNC)
def test_raw_lmdb_put_commit_without_sync(benchmark, portal, raw, report):
    benchmark.pedantic(portal.call, (lambda: raw.commits(ASYNC_OPS, fsync=False),),
                       rounds=ROUNDS_ASYNC, warmup_rounds=1)
    report(benchmark, ASYNC_OPS, baseline=True)


@pytest.mark.benchmark(group=ASYNC)
def test_store_apply_one_append(benchmark, portal, store, report):
    appender = Appender(store, "async", portal)
    benchmark.pedantic(portal.call, (appender.apply, ASYNC_OPS), rounds=ROUNDS_ASYNC, warmup_rounds=1)
    report(benchmark, ASYNC_OPS)


@pytest.mark.benchmark(group=ASYNC)
def test_store_apply_one_append_generic_path(benchmark, portal, store, report):
    """`test_store_apply_one_append` without `LmdbStore._append_one`: what that copy of the
    generic path saves each step (compare the two lines; if they meet, fold it back)."""
    appender = Appender(store, "async", portal)

    def generic(n: int) -> None:
        for _ in range(n):
            (result,) = KVStore.apply(store, [Append(appender.id, appender.epoch, [(next(appender.seqs), STEP_BYTES)])])
            assert result is None, result

    benchmark.pedantic(portal.call, (generic, ASYNC_OPS), rounds=ROUNDS_ASYNC, warmup_rounds=1)
    report(benchmark, ASYNC_OPS)


@pytest.mark.benchmark(group=ASYNC)
def test_committer_submit_async(benchmark, portal, store, report):
    appender = Appender(store, "async", portal)
    benchmark.pedantic(portal.call, (appender.submit, ASYNC_OPS), rounds=ROUNDS_ASYNC, warmup_rounds=1)
    report(benchmark, ASYNC_OPS)


@pytest.mark.benchmark(group=ASYNC)
def test_ctx_run_step_async(benchmark, portal, store, report):
    """A whole no-op step through the Engine: 1,000 steps per invocation, per round."""
    engine = portal.call(lambda: Engine(store, durability="async"))

    async def invocation() -> None:
        outcome = await engine.run(_agents.steps, ASYNC_OPS)
        assert outcome.result == ASYNC_OPS

    benchmark.pedantic(portal.call, (invocation,), rounds=ROUNDS_ASYNC, warmup_rounds=1)
    report(benchmark, ASYNC_OPS)


@pytest.mark.benchmark(group=ASYNC)
def test_ctx_run_step_async_through_attempts(benchmark, portal, store, report):
    """`test_ctx_run_step_async` with each step through the general attempts loop: what the
    first attempt inlined in `ctx.run` saves (if the two lines meet, fold it back)."""
    engine = portal.call(lambda: Engine(store, durability="async"))

    async def invocation() -> None:
        outcome = await engine.run(_agents.steps_through_attempts, ASYNC_OPS)
        assert outcome.result == ASYNC_OPS

    benchmark.pedantic(portal.call, (invocation,), rounds=ROUNDS_ASYNC, warmup_rounds=1)
    report(benchmark, ASYNC_OPS)


@pytest.mark.benchmark(group=SYNC)
def test_raw_lmdb_put_commit_fsync(benchmark, portal, raw, report):
    benchmark.pedantic(portal.call, (lambda: raw.commits(SYNC_OPS, fsync=True),),
                       rounds=ROUNDS_SYNC, warmup_rounds=1)
    report(benchmark, SYNC_OPS, baseline=True)


@pytest.mark.benchmark(group=SYNC)
def test_committer_submit_sync(benchmark, portal, store, report):
    appender = Appender(store, "sync", portal)
    benchmark.pedantic(portal.call, (appender.submit, SYNC_OPS), rounds=ROUNDS_SYNC, warmup_rounds=1)
    report(benchmark, SYNC_OPS)


@pytest.mark.benchmark(group=SYNC)
def test_ctx_run_step_sync(benchmark, portal, store, report):
    """A whole no-op step through the Engine in `sync` mode (50 steps per invocation, per round)."""
    engine = portal.call(lambda: Engine(store, durability="sync"))

    async def invocation() -> None:
        outcome = await engine.run(_agents.steps, SYNC_OPS)
        assert outcome.result == SYNC_OPS

    benchmark.pedantic(portal.call, (invocation,), rounds=ROUNDS_SYNC, warmup_rounds=1)
    report(benchmark, SYNC_OPS)
