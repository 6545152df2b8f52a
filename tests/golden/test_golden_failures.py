"""A failure journaled before failures recorded their traceback (`broke` in `store-views/`,
kept byte for byte) still reads, shows and replays: its `failed` entry decodes with no
frames, its JSON has no `traceback`, and its journal replays against the current code."""

from __future__ import annotations

import os

import pytest

from journal import Failed, LmdbStore, decode_entry
from journal.views import detail, invocation_json
from runtime.testing import replay_journal

from . import views_handlers, writable_copy

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def store(tmp_path):
    opened = LmdbStore(writable_copy("store-views", tmp_path))
    yield opened
    opened.close()


def test_a_failure_journaled_without_a_traceback_reads_and_shows_without_one(store):
    seq, data = store.entries("broke")[-1]
    failed = decode_entry(data, invocation_id="broke", seq=seq)
    assert isinstance(failed, Failed) and failed.traceback == []
    shown = invocation_json(store, store.require("broke"))
    assert shown["error"] == {"type": "TerminalError", "message": "cannot handle 'x'", "terminal": True}
    assert "traceback" not in shown["entries"][-1]
    assert "traceback" not in detail(store, store.require("broke"))["error"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_failure_journaled_without_a_traceback_replays_against_the_current_code(store):
    report = await replay_journal(views_handlers.broke, store, "broke")
    assert report.finished
