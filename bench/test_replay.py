"""Replay of a 5,000-step journal, beside a raw LMDB cursor scan of as many entries.

From the bottom up: reading the entries, decoding them, and a whole `Engine.resume` that
replays every step through `ctx.run` to the promise the handler waits on and suspends
again (so every round replays the same journal). The difference between the last two is
the replayer and the handler.
"""

from __future__ import annotations

import pytest

from journal import Status, decode_entry
from runtime import Engine

from . import _agents

GROUP = "replay, 5,000-step journal"
STEPS = 5000
ENTRIES = STEPS + 1
ROUNDS = 10


@pytest.fixture(scope="module")
def suspended(tmp_path_factory, portal):
    """A store holding one invocation suspended after 5,000 steps, and an engine on it."""
    from journal import LmdbStore

    store = LmdbStore(tmp_path_factory.mktemp("replay") / "store")
    engine = portal.call(lambda: Engine(store, durability="async"))
    outcome = portal.call(engine.run, _agents.long_then_promise, STEPS)
    assert outcome.status == Status.SUSPENDED and outcome.waiting == "go"
    yield store, engine, outcome.id
    store.close()


@pytest.mark.benchmark(group=GROUP)
def test_raw_lmdb_cursor_scan(benchmark, portal, raw, report):
    prefix = raw.fill_journal(ENTRIES)
    assert benchmark.pedantic(portal.call, (raw.read_journal, prefix), rounds=ROUNDS, warmup_rounds=1) == ENTRIES
    report(benchmark, ENTRIES, baseline=True)


@pytest.mark.benchmark(group=GROUP)
def test_store_entries(benchmark, portal, suspended, report):
    store, _, invocation_id = suspended
    assert len(benchmark.pedantic(portal.call, (store.entries, invocation_id), rounds=ROUNDS, warmup_rounds=1)) == ENTRIES
    report(benchmark, ENTRIES)


@pytest.mark.benchmark(group=GROUP)
def test_store_entries_and_decode(benchmark, portal, suspended, report):
    store, _, invocation_id = suspended

    def load() -> dict:
        return {seq: decode_entry(data, invocation_id=invocation_id, seq=seq)
                for seq, data in store.entries(invocation_id)}

    assert len(benchmark.pedantic(portal.call, (load,), rounds=ROUNDS, warmup_rounds=1)) == ENTRIES
    report(benchmark, ENTRIES)


@pytest.mark.benchmark(group=GROUP)
def test_engine_resume_to_wait_point(benchmark, portal, suspended, report):
    _, engine, invocation_id = suspended
    outcome = benchmark.pedantic(portal.call, (engine.resume, invocation_id), rounds=ROUNDS, warmup_rounds=1)
    assert outcome.status == Status.SUSPENDED
    report(benchmark, ENTRIES)
