"""LangGraph's own checkpointer conformance suite (langgraph-checkpoint-conformance 0.0.2), in
full, through the async API and, routed by `SyncApi`, through the sync API, on every store."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability

from journal import LmdbStore, MemoryStore, PostgresStore
from runtime.langgraph import JournalSaver
from runtime.langgraph.testing import SyncApi

# Every capability, the optional delete_for_runs, copy_thread and prune included.
EXPECTED_TESTS = {
    "put": 17, "put_writes": 10, "get_tuple": 10, "list": 16, "delete_thread": 5,
    "delete_for_runs": 7, "copy_thread": 8, "prune": 8,
}


@pytest.mark.parametrize("api", ["async", "sync"])
@pytest.mark.parametrize("backend", ["lmdb", "memory", "postgres"])
def test_the_conformance_suite_passes_in_full(tmp_path, backend, api, request):
    counter = iter(range(100))
    server = request.getfixturevalue("pg_server") if backend == "postgres" else None

    @checkpointer_test(name=f"JournalSaver ({backend}, {api} API)")
    async def factory():
        n = next(counter)
        if backend == "postgres":
            store = PostgresStore(server.new_database())
        else:
            store = LmdbStore(tmp_path / f"db{n}") if backend == "lmdb" else MemoryStore()
        try:
            with JournalSaver(store) as saver:
                yield saver if api == "async" else SyncApi(saver)
        finally:
            store.close()

    report = asyncio.run(validate(factory))
    failures = {cap: r.failures for cap, r in report.results.items() if r.failures}
    assert not failures, failures
    assert {cap.value for cap in Capability} == set(EXPECTED_TESTS)
    assert {cap: r.tests_passed for cap, r in report.results.items()} == EXPECTED_TESTS
    assert sum(r.tests_passed for r in report.results.values()) == 81
    assert report.passed_all_base()
