"""The worker's loop is uvloop unless the setting asks for the standard one."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from app import event_loop
from app.settings import Settings


def _loop_type(choice: event_loop.EventLoopChoice) -> type[asyncio.AbstractEventLoop]:
    seen: list[type[asyncio.AbstractEventLoop]] = []

    async def main() -> None:
        seen.append(type(asyncio.get_running_loop()))

    event_loop.run(main(), choice)
    return seen[0]


def test_the_default_worker_loop_is_uvloop() -> None:
    assert Settings().worker_event_loop == "uvloop"
    assert _loop_type("uvloop") is uvloop.Loop


def test_asyncio_keeps_the_standard_loop() -> None:
    assert not issubclass(_loop_type("asyncio"), uvloop.Loop)


def test_uvloop_falls_back_to_the_standard_loop_where_it_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop: ImportError
    assert not issubclass(_loop_type("uvloop"), uvloop.Loop)
