"""The demo's fake model: a stall or a long answer ends by itself, whatever the caller asked."""

from __future__ import annotations

import time

import pytest

from app.demo import model_server


async def collect(**query: float | int | None) -> list[bytes]:
    return [chunk async for chunk in model_server._tokens(**query)]  # type: ignore[arg-type]


async def test_a_stall_ends_at_the_stream_cap_instead_of_holding_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(model_server, "MAX_STREAM_S", 0.3)
    started = time.monotonic()
    chunks = await collect(first_token_s=0, gap_s=0, tokens=10, stall_after=2)
    assert len(chunks) == 2
    assert time.monotonic() - started >= 0.3  # it did stall, then gave up


async def test_a_long_answer_is_cut_at_the_stream_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_server, "MAX_STREAM_S", 0.3)
    chunks = await collect(first_token_s=0, gap_s=0.05, tokens=100_000, stall_after=None)
    assert 0 < len(chunks) < 100


async def test_a_first_token_later_than_the_cap_never_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(model_server, "MAX_STREAM_S", 0.2)
    assert await collect(first_token_s=60, gap_s=0, tokens=5, stall_after=None) == []
