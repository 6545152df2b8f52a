"""The rules of the `Tables` protocol, as pytest tests."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any

import pytest

from .. import (
    TableDelete,
    TableDeletePrefix,
    TablePut,
    Tables,
)
from ..errors import (
    StoreError,
)

_KEYS = [b"a", b"a\x00", b"a\x00\x01", b"a\x01", b"a\xff", b"a\xff\xff", b"ab", b"b", b"\xff\xff"]


def _fill(store: Any, table: str = "t", keys: list[bytes] = _KEYS) -> None:
    store.table_write([TablePut(table, k, b"v" + k) for k in reversed(keys)])


class TablesContract(abc.ABC):
    """The rules of the `Tables` protocol (`Capability.TABLES`), as pytest tests; subclass it
    with `make_store`, as `StoreContract`."""

    @abc.abstractmethod
    def make_store(self, tmp_path: Any, request: Any) -> Tables:
        """A new, empty store that offers `journal.Tables`."""

    @pytest.fixture
    def store(self, tmp_path: Any, request: Any) -> Iterator[Any]:
        s = self.make_store(tmp_path, request)
        assert isinstance(s, Tables)
        yield s
        s.close()  # type: ignore[attr-defined]  # a store that offers Tables is a Store too

    def test_get_returns_what_was_put_and_none_for_the_missing(self, store: Any) -> None:
        assert store.table_get("t", b"k") is None
        store.table_write([TablePut("t", b"k", b"1")])
        assert store.table_get("t", b"k") == b"1"
        store.table_write([TablePut("t", b"k", b"2")])
        assert store.table_get("t", b"k") == b"2"


    def test_put_without_overwrite_keeps_the_first_value(self, store: Any) -> None:
        store.table_write([TablePut("t", b"k", b"1"), TablePut("t", b"k", b"2", overwrite=False)])
        assert store.table_get("t", b"k") == b"1"
        store.table_write([TablePut("t", b"n", b"3", overwrite=False)])
        assert store.table_get("t", b"n") == b"3"


    def test_one_batch_keeps_some_values_and_replaces_others_across_tables(self, store: Any) -> None:
        store.table_write([TablePut("t", b"kept", b"old"), TablePut("t", b"replaced", b"old")])
        store.table_write([
            TablePut("t", b"kept", b"new", overwrite=False), TablePut("t", b"replaced", b"new"),
            TablePut("u", b"kept", b"fresh", overwrite=False), TablePut("t", b"added", b"fresh"),
        ])
        assert store.table_scan("t") == [(b"added", b"fresh"), (b"kept", b"old"), (b"replaced", b"new")]
        assert store.table_scan("u") == [(b"kept", b"fresh")]

    def test_scan_is_in_bytewise_key_order_within_the_prefix(self, store: Any) -> None:
        _fill(store)
        assert [k for k, _ in store.table_scan("t")] == sorted(_KEYS)
        assert [k for k, _ in store.table_scan("t", b"a\x00")] == [b"a\x00", b"a\x00\x01"]
        assert [k for k, _ in store.table_scan("t", b"a\xff")] == [b"a\xff", b"a\xff\xff"]
        assert [v for _, v in store.table_scan("t", b"b")] == [b"vb"]
        assert store.table_scan("t", b"c") == []


    @pytest.mark.parametrize("prefix", [b"", b"a", b"a\x00", b"a\xff", b"\xff", b"\xff\xff", b"zz", b"0"])
    def test_reverse_scan_is_the_forward_scan_reversed(self, store: Any, prefix: Any) -> None:
        _fill(store)
        forward = store.table_scan("t", prefix)
        assert store.table_scan("t", prefix, reverse=True) == forward[::-1]


    def test_start_is_inclusive_in_both_directions(self, store: Any) -> None:
        _fill(store)
        assert [k for k, _ in store.table_scan("t", b"a", start=b"a\x01")] == [b"a\x01", b"ab", b"a\xff", b"a\xff\xff"]
        assert [k for k, _ in store.table_scan("t", b"a", start=b"a\x01", reverse=True)] == [
            b"a\x01", b"a\x00\x01", b"a\x00", b"a"]
        # A start between keys: backwards begins at the key just below it.
        assert [k for k, _ in store.table_scan("t", b"a", start=b"a\x02", reverse=True, limit=2)] == [b"a\x01", b"a\x00\x01"]


    def test_limit_counts_items_in_scan_order(self, store: Any) -> None:
        _fill(store)
        assert [k for k, _ in store.table_scan("t", b"a", limit=2)] == [b"a", b"a\x00"]
        assert [k for k, _ in store.table_scan("t", b"a", reverse=True, limit=1)] == [b"a\xff\xff"]
        assert store.table_scan("t", limit=0) == []


    def test_tables_are_separate_from_each_other(self, store: Any) -> None:
        _fill(store, "one")
        store.table_write([TablePut("two", b"a", b"other")])
        assert store.table_get("one", b"a") == b"va"
        assert store.table_scan("two") == [(b"a", b"other")]
        assert store.table_scan("three") == []


    def test_a_batch_deletes_keys_and_prefixes_in_order(self, store: Any) -> None:
        _fill(store)
        store.table_write([
            TableDeletePrefix("t", b"a\x00"),
            TableDelete("t", b"b"),
            TableDelete("t", b"missing"),
            TablePut("t", b"a\x00\x02", b"new"),  # after the prefix delete: it stays
        ])
        assert [k for k, _ in store.table_scan("t")] == [b"a", b"a\x00\x02", b"a\x01", b"ab", b"a\xff", b"a\xff\xff", b"\xff\xff"]
        store.table_write([TableDeletePrefix("t", b"")])
        assert store.table_scan("t") == []


    def test_a_bad_batch_changes_nothing(self, store: Any) -> None:
        _fill(store)
        with pytest.raises(StoreError, match="table key must be"):
            store.table_write([TableDelete("t", b"a"), TablePut("t", b"", b"x")])
        with pytest.raises(StoreError, match="table name"):
            store.table_write([TableDelete("t", b"a"), TablePut("Bad-Name", b"k", b"x")])
        assert store.table_get("t", b"a") == b"va"


    @pytest.mark.parametrize("call", [
        lambda s: s.table_get("t", b"x" * 481),
        lambda s: s.table_scan("t", b"a", start=b"b"),
        lambda s: s.table_scan("t", limit=-1),
        lambda s: s.table_get("", b"k"),
    ])
    def test_bad_arguments_say_what_was_wrong(self, store: Any, call: Any) -> None:
        with pytest.raises(StoreError, match="table|scan|key"):
            call(store)
