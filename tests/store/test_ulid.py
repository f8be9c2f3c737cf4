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


def test_a_batch_of_ids_is_what_one_call_each_makes_in_one_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """new_ulids: the same ids as new_ulid called ``count`` times in one ms, prefix aside."""
    monkeypatch.setattr(codec.time, "time", lambda: 1_764_000_000.123)
    for bits in ((1 << 20) - 3, 5, (1 << 40) - 700):  # across a change of the high pairs, or not
        monkeypatch.setattr(codec, "_last_ulid", [1_764_000_000_123, bits])
        one_by_one = [codec.new_ulid() for _ in range(1_000)]
        after_one_by_one = list(codec._last_ulid)
        monkeypatch.setattr(codec, "_last_ulid", [1_764_000_000_123, bits])
        assert codec.new_run_ids("q.x", 1_000) == [f"q.x.{made}" for made in one_by_one]
        assert codec._last_ulid == after_one_by_one  # the next id comes after the batch
        assert codec.new_ulids(0) == []


def test_a_batch_that_no_longer_fits_in_its_millisecond_takes_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the top of the random part: the next ms, and a random part with room for all."""
    monkeypatch.setattr(codec.time, "time", lambda: 1_764_000_000.123)
    monkeypatch.setattr(codec, "_last_ulid", [1_764_000_000_123, (1 << 80) - 10])
    drawn = [b"\xff" * 10, b"\x00" * 9 + b"\x07"]  # the first has no room for 20 ids
    monkeypatch.setattr(codec.os, "urandom", lambda n: drawn.pop(0))
    ids = codec.new_ulids(20)
    assert not drawn
    stamp = 1_764_000_000_124
    assert ids == [reference((stamp << 80) | bits) for bits in range(7, 27)]
    assert codec._last_ulid == [stamp, 26]


def test_batches_and_single_ids_mixed_sort_in_creation_order() -> None:
    ids: list[str] = []
    for size in [1, 500, 3, 0, 1_000] * 5:
        ids += codec.new_ulids(size)
        ids.append(codec.new_ulid())
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
