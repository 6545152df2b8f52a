"""Entry kinds: round-trips, compactness, and bytes that never change by accident."""

import datetime

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from journal import (
    NIL,
    Called,
    Cancelled,
    CancelReceived,
    Completed,
    ContinuedAsNew,
    Emitted,
    ErrorInfo,
    Failed,
    Frame,
    Now,
    Patched,
    Promise,
    Published,
    Received,
    Replied,
    Selected,
    Sleep,
    Started,
    StateGot,
    StateKeys,
    StateSet,
    Step,
    Tagged,
    decode_entry,
    decode_value,
    encode_entry,
    encode_value,
    kind_of,
)
from journal.errors import CorruptEntry, EntryTooLarge

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
times = st.integers(0, 2**62)
names = st.text(min_size=1, max_size=30)
raws = values.map(encode_value)
errors = st.builds(ErrorInfo, st.text(max_size=20), st.text(max_size=50), st.booleans())

entries = st.one_of(
    st.builds(Started, st.text(max_size=40), raws, times, st.none() | names, st.integers(0, 2**64 - 1), st.none() | names),
    st.builds(Step, names, st.integers(0, 2**64 - 1), times, raws, st.none() | errors, st.integers(1, 100)),
    st.builds(Now, times),
    st.builds(Sleep, times, times),
    st.builds(Promise, names, times, raws, st.none() | st.text(max_size=20)),
    st.builds(Completed, times, raws),
    st.builds(Failed, times, errors),
    st.builds(Cancelled, times, st.text(max_size=20)),
    st.builds(Emitted, times, raws),
    st.builds(Patched, names, times),
    st.builds(CancelReceived, times, st.text(max_size=20)),
    st.builds(StateGot, names, times, raws, st.booleans(), times),
    st.builds(StateSet, names, times, raws, st.booleans(), times),
    st.builds(StateKeys, times, st.lists(names, max_size=3), times),
    st.builds(Called, names, st.integers(0, 2**64 - 1), times, names, st.booleans(), times),
    st.builds(Selected, times, st.integers(0, 100), times),
    st.builds(ContinuedAsNew, times, names),
    st.builds(Received, names, times, names, raws, times, st.booleans(), st.booleans()),
    st.builds(Replied, names, times, raws, times),
    st.builds(Published, names, times, raws, times),
    st.builds(Tagged, names, times, names, times),
)


def _plain(entry):
    """Entries compare by their fields, with Raw values compared as bytes."""
    return [bytes(v) if isinstance(v, msgspec.Raw) else v for v in msgspec.structs.astuple(entry)]


@given(entries)
def test_every_entry_kind_round_trips(entry):
    decoded = decode_entry(encode_entry(entry))
    assert type(decoded) is type(entry)
    assert _plain(decoded) == _plain(entry)


@given(values)
def test_values_round_trip_through_raw_bytes(value):
    assert decode_value(encode_value(value)) == value


def test_values_decode_lazily_with_the_type_asked_for():
    class Point(msgspec.Struct):
        x: int
        y: int

    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    raw = encode_value({"x": 1, "y": 2})
    assert decode_value(raw, Point) == Point(1, 2)
    assert decode_value(encode_value(when), datetime.datetime) == when


def test_a_step_with_a_100_byte_value_costs_at_most_40_bytes_more():
    value = encode_value(b"x" * 100)  # 100 bytes of payload + msgpack header
    name = "search"
    size = len(encode_entry(Step(name, 2**64 - 1, 2**62, value, prev=2**62 - 1)))  # the widest digest, time and prev
    overhead = size - len(value) - len(name)
    assert overhead <= 40, overhead


# Golden bytes: the format on disk. If one of these changes, old journals stop reading.
GOLDEN = [
    # `trace` (the 7th field, appended for OpenTelemetry) changed these bytes deliberately: 0x97 -> 0x98 and a nil.
    (Started("pkg.mod:agent", encode_value("hi"), 1, "k", 2, None), "98a773746172746564ad706b672e6d6f643a6167656e74a2686901a16b02c0c0"),
    (Started("pkg.mod:agent", encode_value("hi"), 1, "k", 2, None, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
     "98a773746172746564ad706b672e6d6f643a6167656e74a2686901a16b02c0d93730302d30616637363531393136636434336464383434386562323131633830333139632d623761643662373136393230333333312d3031"),
    (Step("plan", 7, 1, encode_value([1, 2])), "98a473746570a4706c616e0701920102c00100"),
    (Step("plan", 7, 1, error=ErrorInfo("ValueError", "bad", True)), "98a473746570a4706c616e0701c093aa56616c75654572726f72a3626164c30100"),
    (Now(5), "93a36e6f770500"),
    (Sleep(1, 2), "94a5736c656570010200"),
    (Promise("ok", 3, encode_value(True)), "97a770726f6d697365a26f6b03c3c000c2"),
    (Completed(4, encode_value("done")), "93a9636f6d706c6574656404a4646f6e65"),
    # `traceback` (the 3rd field, appended for the user's frames) changed these bytes deliberately: 0x93 -> 0x94 and [].
    (Failed(4, ErrorInfo("E", "m")), "94a66661696c65640493a145a16dc390"),
    (Failed(4, ErrorInfo("E", "m"), [Frame("a.py", 3, "agent")]), "94a66661696c65640493a145a16dc39193a4612e707903a56167656e74"),
    (Cancelled(6, "stop"), "94a963616e63656c6c656406a473746f7090"),
    (Emitted(7, encode_value(1)), "94a7656d6974746564070100"),
    (Patched("v2", 8), "94a770617463686564a276320800"),
    (CancelReceived(9, ""), "94af63616e63656c5f726563656976656409a000"),
    (StateGot("notes", 1, encode_value([1]), True, 2), "96a973746174655f676574a56e6f746573019101c302"),
    (StateSet("notes", 1, encode_value([1]), False, 2), "98a973746174655f736574a56e6f746573019101c20200c0"),
    (StateKeys(1, ["a", "b"], 2), "94aa73746174655f6b6579730192a161a16202"),
    (Called("pkg.mod:child", 7, 1, "inv.3", True, 2), "97a663616c6c6564ad706b672e6d6f643a6368696c640701a5696e762e33c302"),
    (Selected(1, 0, 2), "94a873656c6563746564010002"),
    (ContinuedAsNew(1, "inv~1"), "93b0636f6e74696e7565645f61735f6e657701a5696e767e31"),
    (Received("chat", 1, "m-1", encode_value("hi"), 2), "98a87265636569766564a46368617401a36d2d31a2686902c2c2"),
    (Received("chat", 1, "", prev=2, timed_out=True), "98a87265636569766564a46368617401a0c002c3c2"),
    (Replied("m-1", 3, encode_value(1), 2), "95a77265706c696564a36d2d31030102"),
    (Published("progress", 4, encode_value({"a": 1}), 2), "95a97075626c6973686564a870726f67726573730481a1610102"),
    (Tagged("customer", 1, "acme", 2), "95a6746167676564a8637573746f6d657201a461636d6502"),
]


def test_a_started_entry_written_before_trace_existed_still_decodes():
    old = bytes.fromhex("97a773746172746564ad706b672e6d6f643a6167656e74a2686901a16b02c0")
    assert decode_entry(old) == Started("pkg.mod:agent", encode_value("hi"), 1, "k", 2, None, None)


@pytest.mark.parametrize(("entry", "golden"), GOLDEN, ids=[kind_of(e) for e, _ in GOLDEN])
def test_golden_bytes_of_each_kind(entry, golden):
    assert encode_entry(entry).hex() == golden


# Bytes written before a kind gained trailing fields (with defaults): they still decode.
EARLIER = [
    ("93a963616e63656c6c656406a473746f70", Cancelled(6, "stop")),  # before `rolled_back`
    ("93a66661696c65640493a145a16dc3", Failed(4, ErrorInfo("E", "m"))),  # before `traceback`
    ("96a973746174655f736574a56e6f746573019101c202", StateSet("notes", 1, encode_value([1]), False, 2)),  # before `prior`, `was`
]


@pytest.mark.parametrize(("golden", "entry"), EARLIER, ids=[kind_of(e) for _, e in EARLIER])
def test_entries_written_before_a_kind_gained_fields_still_decode(golden, entry):
    decoded = decode_entry(bytes.fromhex(golden))
    assert encode_entry(decoded) == encode_entry(entry)


def test_no_value_is_msgpack_nil():
    assert bytes(NIL) == b"\xc0"


def test_an_oversized_entry_is_refused_with_advice():
    with pytest.raises(EntryTooLarge, match="journal a reference"):
        encode_entry(Completed(1, encode_value(b"x" * 2000)), max_bytes=1000)


def test_garbage_bytes_report_invocation_and_seq():
    with pytest.raises(CorruptEntry) as info:
        decode_entry(b"\x93\xa4nope\x01\x02", invocation_id="inv-7", seq=3)
    assert "inv-7" in str(info.value) and "seq 3" in str(info.value)
    assert info.value.invocation_id == "inv-7" and info.value.seq == 3


def test_decoding_never_executes_code():
    import pickle

    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('executed')",))

    with pytest.raises(CorruptEntry):
        decode_entry(pickle.dumps(Boom()))
