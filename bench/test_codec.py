"""The codec: entries and values to and from msgpack (one operation per call)."""

from __future__ import annotations

import pytest

from journal import Step, decode_entry, decode_value, digest, encode_entry, encode_value

from ._raw import STEP_BYTES

VALUE = b"x" * 100
RAW_VALUE = encode_value(VALUE)
STEP = Step("step", 0x1234_5678_9ABC_DEF0, 1_700_000_000_000_000, RAW_VALUE)

pytestmark = pytest.mark.benchmark(group="codec")


def test_encode_step_entry_with_100_byte_value(benchmark, report):
    assert benchmark(encode_entry, STEP) == encode_entry(STEP)
    report(benchmark, 1)


def test_decode_step_entry_with_100_byte_value(benchmark, report):
    assert benchmark(decode_entry, STEP_BYTES).name == "step"
    report(benchmark, 1)


def test_encode_100_byte_value(benchmark, report):
    assert bytes(benchmark(encode_value, VALUE)) == bytes(RAW_VALUE)
    report(benchmark, 1)


def test_decode_100_byte_value_typed(benchmark, report):
    assert benchmark(decode_value, RAW_VALUE, bytes) == VALUE
    report(benchmark, 1)


def test_digest_of_a_step_call(benchmark, report):
    benchmark(digest, "search", ("what is LMDB?",), {"limit": 10})
    report(benchmark, 1)


def test_entry_is_compact():
    """Not timed: a 100-byte step value costs at most 40 bytes beyond the value and the name."""
    overhead = len(encode_entry(STEP)) - len(VALUE) - len("step")
    assert overhead <= 40, overhead
