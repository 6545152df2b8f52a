"""pytest plugin (entry point `journal`): fixtures for testing handlers.

- `journal_store`: a fresh `LmdbStore` in the test's temporary directory, closed afterwards.
- `engine`: an `Engine` on `journal_store` with the determinism guard on for the test, so
  handler code that reads the clock or an unseeded random source outside `ctx.run`
  raises `DeterminismViolation`.

Both are plain fixtures, usable from async tests run by anyio's pytest plugin (which
ships with anyio)::

    import pytest

    @pytest.mark.anyio
    async def test_agent(engine):
        outcome = await engine.run(agent, "question")
        assert outcome.status == "completed"

Override `journal_engine_options` (a fixture returning a dict of `Engine` options) to
change the durability, `inline_sleep_limit` and so on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from journal import LmdbStore

from .._engine._engine import Engine
from .._handler._guard import determinism_guard


@pytest.fixture
def journal_store(tmp_path: Any) -> Iterator[LmdbStore]:
    """A fresh LMDB journal store in the test's temporary directory."""
    store = LmdbStore(tmp_path / "journal")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def journal_engine_options() -> dict[str, Any]:
    """Options for the `engine` fixture's `Engine` (override it in a conftest.py or a test module)."""
    return {}


@pytest.fixture
def engine(journal_store: LmdbStore, journal_engine_options: dict[str, Any]) -> Iterator[Engine]:
    """An `Engine` on `journal_store`, with the determinism guard on while the test runs."""
    with determinism_guard():
        yield Engine(journal_store, **journal_engine_options)
