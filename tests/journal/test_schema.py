"""The check a typed promise's value meets when it is resolved (`journal/_schema.py`): against
the JSON Schema msgspec or Pydantic emits for the awaited type, it refuses what the type
refuses in what it checks, accepts what the type accepts, and its example fits the type."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Annotated, Literal, NotRequired, TypedDict

import msgspec
import pydantic
import pytest

from journal import check_schema, schema_example


class Review(msgspec.Struct):
    approved: bool
    note: str = ""


class Cat(msgspec.Struct, tag="cat"):
    lives: Annotated[int, msgspec.Meta(ge=0, le=9)]


class Dog(msgspec.Struct, tag="dog"):
    name: Annotated[str, msgspec.Meta(min_length=1)]


@dataclasses.dataclass
class Slot:
    seats: list[int]
    room: str | None = None


class Meeting(msgspec.Struct):
    at: datetime.datetime


class Ticket(TypedDict):
    id: str
    labels: NotRequired[list[str]]


class Score(pydantic.BaseModel):
    ok: bool
    score: int = pydantic.Field(default=0, ge=0)


def _schema(tp):
    return Score.model_json_schema() if tp is Score else msgspec.json.schema(tp)


def _accepted(tp, value) -> bool:
    try:
        Score.model_validate(value) if tp is Score else msgspec.convert(value, tp)
    except (msgspec.ValidationError, pydantic.ValidationError):
        return False
    return True


CASES = [
    (bool, [True, False, 1, 0, "true", None]),
    (Review, [{"approved": True}, {"approved": True, "note": "x"}, True, {}, {"approved": "yes"}, {"note": "x"}]),
    (Review | None, [None, {"approved": False}, 3]),
    (Cat | Dog, [{"type": "cat", "lives": 3}, {"type": "cat", "lives": 10}, {"type": "dog", "name": ""},
                 {"type": "dog", "name": "rex"}, {"type": "cow"}]),
    (Literal["yes", "no"], ["yes", "no", "maybe", True]),
    (Slot, [{"seats": [1, 2]}, {"seats": [], "room": "A"}, {"seats": ["a"]}, {"room": None}, {"seats": [], "room": 1}]),
    (Ticket, [{"id": "t"}, {"id": "t", "labels": ["a"]}, {"labels": []}, {"id": 3}]),
    (Score, [{"ok": True}, {"ok": True, "score": 3}, {"ok": True, "score": -1}, {"ok": "x"}, True]),
    (list[int], [[], [1, 2], [1, "2"], [True]]),
    (dict[str, float], [{"a": 1.5, "b": 2}, {"a": "x"}]),
]


@pytest.mark.parametrize(("tp", "values"), CASES, ids=[repr(tp) for tp, _ in CASES])
def test_the_check_agrees_with_the_type_and_its_example_fits(tp, values):
    schema = _schema(tp)
    for value in values:
        assert (check_schema(schema, value) is None) == _accepted(tp, value), value
    assert _accepted(tp, schema_example(schema))


def test_a_refusal_says_where_and_what_was_expected():
    schema = msgspec.json.schema(Review)
    assert check_schema(schema, True) == "value: expected object, got boolean true"
    assert check_schema(schema, {"approved": 1}) == "value.approved: expected boolean, got integer 1"
    assert check_schema(schema, {}) == "value: the field 'approved' is missing"
    assert check_schema(msgspec.json.schema(list[int]), [1, None]) == "value[1]: expected integer, got null"


def test_bytes_and_datetimes_are_checked_as_json_carries_them():
    schema = msgspec.json.schema(Meeting)
    assert check_schema(schema, {"at": datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)}) is None
    assert check_schema(schema, {"at": "2026-12-02T10:00:00Z"}) is None
    assert check_schema(msgspec.json.schema(bytes), b"\x00\x01") is None


def test_what_the_schema_does_not_say_is_left_to_the_handlers_decoding():
    # msgspec's schema of a datetime is a plain string: the check cannot refuse "tomorrow",
    # which the handler's decoding then does (the check never refuses what the type accepts).
    assert check_schema(msgspec.json.schema(Meeting), {"at": "tomorrow"}) is None
    assert not _accepted(Meeting, {"at": "tomorrow"})
