"""The store's families of the Prometheus metrics: every commit the engine makes is timed
(`journal_store_commit_seconds`), and a PostgreSQL store that loses its server and connects
again counts it (`journal_store_reconnects_total`). The takeover counter is checked with a
SIGKILLed server in tests/cli/test_metrics.py."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from journal import PostgresStore, Status
from runtime import Context, Engine
from runtime.metrics import Metrics

from ..waiting import wait_until


def _samples(metrics: Metrics) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(metrics.exposition().decode())
            for s in f.samples if not s.labels or set(s.labels) == {"le"} and s.labels["le"] == "+Inf"}


def _same(value: object) -> object:
    return value


async def three_steps(ctx: Context, n: int) -> int:
    for i in range(3):
        await ctx.run(f"s{i}", _same, i)
    return n


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_every_commit_of_the_engine_is_timed(tmp_path, anyio_backend, durability):
    async with Engine.open(tmp_path / "db", durability=durability) as engine:
        metrics = Metrics(engine.store, committer=engine.committer)
        engine.observe(metrics)
        inline = []  # the commits made at once (the `async` mode's path), counted where the store is called
        commit_now = engine.committer.commit_now

        def counted(op):
            inline.append(op)
            return commit_now(op)

        engine.committer.commit_now = counted  # type: ignore[method-assign]
        before = _samples(metrics)
        assert before["journal_store_commit_seconds_count"] == 0
        for n in range(5):
            outcome = await engine.run(three_steps, n, id=f"inv-{n}")
            assert outcome.status == Status.COMPLETED and outcome.result == n
        found = _samples(metrics)
        commits = engine.committer.batches + len(inline)
        assert commits >= 5  # at least each run's end
        assert found["journal_store_commit_seconds_count"] == commits
        assert found["journal_store_commit_seconds_bucket"] == commits  # le="+Inf"
        assert found["journal_store_commit_seconds_sum"] > 0
        assert found["journal_store_reconnects_total"] == 0  # a local store has no server to lose
        assert found["journal_lease_takeovers_total"] == 0  # each run leased by the engine that started it


def test_a_postgresql_store_counts_each_time_it_connects_again(postgres_url):
    import psycopg

    store = PostgresStore(postgres_url)
    try:
        metrics = Metrics(store)
        assert store.get("nothing") is None  # opens the reader's session
        assert _samples(metrics)["journal_store_reconnects_total"] == 0
        for n in (1, 2):
            ended = store._reader.conn.info.backend_pid
            with psycopg.connect(postgres_url, autocommit=True) as admin:  # the server ends the session
                admin.execute("SELECT pg_terminate_backend(%s)", (ended,))
                wait_until(lambda pid=ended: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                                         (pid,)).fetchone()[0] == 0, "the session to end")
            assert store.ids(Status.PENDING) == []  # read again on a new session
            assert store._reader.conn.info.backend_pid != ended
            assert store.reconnects() == n
            assert _samples(metrics)["journal_store_reconnects_total"] == n
    finally:
        store.close()
