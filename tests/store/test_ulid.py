"""Run ids: the table-based ULID encoder writes what the base32 codec wrote, and sorts by time."""

from __future__ import annotations

import base64
import os

import pytest

from app.store import codec

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TO_CROCKFORD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _CROCKFORD)


def reference(value: int) -> str:
    """The previous encoder (RFC 4648 base32 mapped to Crockford's alphabet)."""
    return base64.b32encode((value << 6).to_bytes(17, "big"))[:26].decode().translate(_TO_CROCKFORD)


def test_the_encoder_writes_what_the_base32_codec_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    values = [0, 1, (1 << 128) - 1, 1 << 127, (1 << 80) - 1, 1 << 80]
    values += [int.from_bytes(os.urandom(16), "big") for _ in range(2_000)]
    for value in values:
        stamp, bits = value >> 80, value & ((1 << 80) - 1)
        random_bytes = bits.to_bytes(10, "big")
        monkeypatch.setattr(codec.os, "urandom", lambda n, given=random_bytes: given)
        made = codec.new_ulid(stamp)
        assert made == reference(value), value
        assert len(made) == 26 and set(made) <= set(_CROCKFORD)


def test_ids_made_in_one_process_sort_in_creation_order() -> None:
    ids = [codec.new_ulid() for _ in range(5_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_ids_made_in_one_millisecond_are_the_reference_encoding_of_each_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The remembered time and high random pairs never leak from one id into the next."""
    monkeypatch.setattr(codec.time, "time", lambda: 1_764_000_000.123)
    start = (1 << 80) - 3 - (1 << 20)  # counts across a change of the high pairs and the ms
    for bits in (start, (1 << 20) - 2, (1 << 80) - 2):
        monkeypatch.setattr(codec, "_last_ulid", [1_764_000_000_123, bits])
        for _ in range(4):
            made = codec.new_ulid()
            stamp, last = codec._last_ulid
            assert made == reference((stamp << 80) | last)
