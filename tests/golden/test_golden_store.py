"""A whole LMDB store written by format version 1, kept byte for byte in `store-v1/`.

Every later version of journal must open it as it is (or migrate it explicitly), list its
invocations, pass `check`, replay its finished journals and finish its suspended one. The
store was made with the `journal` command from `tests.golden.handlers`:

    journal run tests.golden.handlers:triage --id done --input '"please refund me"'
    journal resolve done approve true && journal resume done
    journal run tests.golden.handlers:triage --id waiting --input '"hello"'
    journal run tests.golden.handlers:fan_out --id fan --input '["a","b","c"]'

then copied with LMDB's compacting copy. See docs/format.md for when the format version
changes.
"""

import os

import pytest

from journal import FORMAT_VERSION, LmdbStore, Status, check, decode_entry
from runtime import Engine
from runtime.testing import replay_journal

from . import handlers, writable_copy

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def golden(tmp_path):
    """A writable copy of the golden store (opening a store creates its lock file)."""
    store = LmdbStore(writable_copy("store-v1", tmp_path))
    yield store
    store.close()


def test_the_golden_store_is_of_the_format_this_version_writes():
    # When FORMAT_VERSION changes, keep store-v1 and add the new version's golden store
    # beside it, with a test that opens (or migrates) every older one.
    assert FORMAT_VERSION == 1


def test_every_invocation_and_entry_of_the_golden_store_reads_back(golden):
    records = {r.id: r for r in golden.list()}
    assert {i: (r.handler, r.status) for i, r in records.items()} == {
        "done": ("tests.golden.handlers:triage", Status.COMPLETED),
        "waiting": ("tests.golden.handlers:triage", Status.SUSPENDED),
        "fan": ("tests.golden.handlers:fan_out", Status.COMPLETED),
    }
    kinds = {
        i: [type(decode_entry(data, invocation_id=i, seq=seq)).__name__ for seq, data in golden.entries(i)]
        for i in records
    }
    assert kinds == {
        "done": ["Started", "Step", "Now", "Step", "Promise", "Completed"],
        "waiting": ["Started", "Step", "Now", "Step"],  # a promise not yet resolved journals nothing
        "fan": ["Started", "Step", "Step", "Step", "Completed"],
    }
    assert check(golden) == []


async def test_finished_journals_of_the_golden_store_replay_against_the_current_code(golden):
    for invocation_id, fn in (("done", handlers.triage), ("fan", handlers.fan_out)):
        report = await replay_journal(fn, golden, invocation_id)
        assert report.finished, invocation_id


async def test_the_suspended_invocation_of_the_golden_store_finishes_when_resolved(golden):
    async with Engine.open(store=golden) as engine:
        await engine.resolve("waiting", "approve", True)
        outcome = await engine.resume("waiting")
    assert outcome.status == Status.COMPLETED
    assert outcome.result["reply"] == "[other] re: hello"
    assert golden.get("waiting").status == Status.COMPLETED
