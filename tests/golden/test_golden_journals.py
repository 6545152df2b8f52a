"""Journals recorded by earlier runs, kept as bytes, replayed against the current code.

They prove two things: entries written before keep decoding (the format did not change by
accident), and replay tells a journal that still matches the code from one that does not.
"""

import json
import os

import pytest

from journal import Acquire, Append, InvocationRecord, MemoryStore, Status, decode_entry
from runtime import NondeterminismError
from runtime.testing import replay_journal

from . import handlers

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def load(name: str) -> tuple[MemoryStore, str]:
    """A store holding the golden journal `name`, byte for byte."""
    with open(os.path.join(HERE, name)) as f:
        header, *rows = [json.loads(line) for line in f]
    entries = [(row["seq"], bytes.fromhex(row["entry"])) for row in rows]
    store = MemoryStore()
    started = decode_entry(entries[0][1])
    record = InvocationRecord(header["id"], header["handler"], Status.PENDING, started.at, started.at,
                              header["key"], started.input_digest)
    store.create(record, entries[0][1])
    epoch, _ = store.apply_one(Acquire(header["id"], "golden", "golden", 0, 10**12, started.at))
    store.apply_one(Append(header["id"], epoch, entries[1:]))
    return store, header["id"]


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(HERE) if n.endswith(".jsonl")))
def test_every_golden_entry_still_decodes(name):
    store, invocation_id = load(name)
    for seq, data in store.entries(invocation_id):
        decode_entry(data, invocation_id=invocation_id, seq=seq)


async def test_a_completed_journal_replays_against_the_current_code():
    store, invocation_id = load("triage-completed.jsonl")
    report = await replay_journal(handlers.triage, store, invocation_id)
    assert report.finished and report.checked == 4  # classify, now, draft, approve


async def test_concurrent_branches_replay_whatever_order_they_run_in():
    store, invocation_id = load("fan-out-completed.jsonl")
    report = await replay_journal(handlers.fan_out, store, invocation_id)
    assert report.finished


async def test_a_journal_recorded_before_a_step_was_renamed_is_a_nondeterminism_error():
    store, invocation_id = load("triage-before-rename.jsonl")
    with pytest.raises(NondeterminismError) as info:
        await replay_journal(handlers.triage, store, invocation_id)
    assert info.value.seq == 3
    assert "'compose'" in str(info.value) and "'draft'" in str(info.value)
