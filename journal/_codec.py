"""Encoding and decoding of entries and of the values they carry.

One encoder and one decoder are reused for every call: building them is the costly part.
Nothing here ever executes code from the bytes it reads (no pickle): msgpack only,
decoded into known Struct types.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from ._entries import Entry
from .errors import CorruptEntry, EntryTooLarge

DEFAULT_MAX_ENTRY_BYTES = 64 * 1024 * 1024

_encoder = msgspec.msgpack.Encoder()
_entry_decoder = msgspec.msgpack.Decoder(Entry)
_any_decoder = msgspec.msgpack.Decoder()
_typed_decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}


class UnencodableValue(TypeError):
    """A value msgspec cannot encode; the runtime turns this into a TerminalError."""


def encode_value(value: Any) -> msgspec.Raw:
    """Encode a user value to raw msgpack, or raise `UnencodableValue` naming its type."""
    try:
        return msgspec.Raw(_encoder.encode(value))
    except (TypeError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
        raise UnencodableValue(
            f"a value of type {type(value).__qualname__} cannot be journaled ({exc}); "
            "return JSON-like data, a msgspec.Struct, a dataclass, datetimes or bytes"
        ) from None


def decode_value(raw: bytes | msgspec.Raw | None, type: Any = Any) -> Any:
    """Decode raw msgpack as `type` (any msgspec-supported type)."""
    if raw is None:
        return None
    if type is Any or type is None:
        return _any_decoder.decode(raw)
    decoder = _typed_decoders.get(type)
    if decoder is None:
        decoder = _typed_decoders.setdefault(type, msgspec.msgpack.Decoder(type))
    return decoder.decode(raw)


def encode_entry(entry: Entry, max_bytes: int = DEFAULT_MAX_ENTRY_BYTES) -> bytes:
    data = _encoder.encode(entry)
    if len(data) > max_bytes:
        raise EntryTooLarge(
            f"a {type(entry).__name__} entry would take {len(data):,} bytes, over the limit of "
            f"{max_bytes:,}; journal a reference (a file path, an object-store key) instead of the "
            "data itself, or raise the store's max_entry_bytes"
        )
    return data


def decode_entry(data: bytes, *, invocation_id: str | None = None, seq: int | None = None) -> Entry:
    try:
        return _entry_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        where = f"invocation {invocation_id!r} seq {seq}" if invocation_id is not None else "an entry"
        raise CorruptEntry(
            f"{where} does not decode ({exc}); run `journal check` to list every damaged entry",
            invocation_id=invocation_id,
            seq=seq,
        ) from None


def _digest_fallback(obj: Any) -> Any:
    # Arguments that cannot be encoded (clients, callables) still count by their type name,
    # so a changed argument type is noticed while unencodable handles do not break replay.
    return f"<{type(obj).__module__}.{type(obj).__qualname__}>"


_digest_encoder = msgspec.msgpack.Encoder(enc_hook=_digest_fallback, order="deterministic")


def digest(*parts: Any) -> int:
    """A stable 64-bit digest of encodable arguments (used to detect changed calls on replay)."""
    try:
        data = _digest_encoder.encode(parts)
    except (TypeError, OverflowError, RecursionError, msgspec.EncodeError):
        data = repr(tuple(type(p).__qualname__ for p in parts)).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
