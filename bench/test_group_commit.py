"""Group commit in `sync` mode: 1, 10 and 100 concurrent appenders (tasks on one event loop),
beside raw LMDB writing 100 puts per fsynced transaction in the same session."""

from __future__ import annotations

import itertools

import anyio
import pytest

from journal import Append, Committer

from ._raw import STEP_BYTES
from ._workloads import _open_invocations

GROUP = "group commit, sync"
RAW_TXNS, RAW_PER_TXN = 10, 100
APPENDS_EACH = {1: 100, 10: 50, 100: 10}  # appends per appender per round
ROUNDS = 8


@pytest.mark.benchmark(group=GROUP)
def test_raw_lmdb_100_puts_per_fsynced_txn(benchmark, portal, raw, report):
    benchmark.pedantic(portal.call, (lambda: raw.group_commits(RAW_TXNS, RAW_PER_TXN),),
                       rounds=ROUNDS, warmup_rounds=1)
    report(benchmark, RAW_TXNS * RAW_PER_TXN, baseline=True)


@pytest.mark.parametrize("appenders", [1, 10, 100])
@pytest.mark.benchmark(group=GROUP)
def test_concurrent_appenders(benchmark, portal, store, report, appenders):
    owned = _open_invocations(store, appenders)
    committer = portal.call(lambda: Committer(store, "sync"))
    seqs = {invocation_id: itertools.count(1) for invocation_id, _ in owned}
    each = APPENDS_EACH[appenders]

    async def append(invocation_id: str, epoch: int) -> None:
        for _ in range(each):
            await committer.submit(Append(invocation_id, epoch, [(next(seqs[invocation_id]), STEP_BYTES)]))

    async def round_() -> None:
        async with anyio.create_task_group() as tg:
            for invocation_id, epoch in owned:
                tg.start_soon(append, invocation_id, epoch)

    before = committer.batches
    benchmark.pedantic(portal.call, (round_,), rounds=ROUNDS, warmup_rounds=1)
    total = appenders * each
    benchmark.extra_info["appends_per_fsync"] = total * (ROUNDS + 1) / (committer.batches - before)
    report(benchmark, total)
