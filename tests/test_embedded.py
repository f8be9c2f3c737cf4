"""The embedded Redis: which binary it picks, and that its password is required and kept secret."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import redis

from app.stack import embedded
from app.stack.embedded import EmbeddedRedis, choose_redis_server


def fake_redis_server(directory: Path, version: str) -> Path:
    """An executable named redis-server that reports ``version`` like the real one does."""
    directory.mkdir(parents=True)
    path = directory / "redis-server"
    path.write_text(f"#!/bin/sh\necho 'Redis server v={version} sha=00000000:0 bits=64'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_redis_server_7_on_path_is_preferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fake_redis_server(tmp_path / "bin", "7.2.4")
    monkeypatch.setenv("PATH", str(path.parent))
    chosen = choose_redis_server()
    assert chosen is not None
    assert (chosen.path, chosen.version) == (path, (7, 2, 4))
    assert chosen.describe() == f"redis-server 7.2.4 ({path})"


def test_an_older_redis_server_on_path_gives_way_to_the_bundled_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = fake_redis_server(tmp_path / "bin", "6.0.9")
    monkeypatch.setenv("PATH", str(old.parent))
    bundled = embedded._bundled_redis_server()
    chosen = choose_redis_server()
    assert chosen is not None
    if bundled is None:  # without the embedded extra the old one is all there is
        assert chosen.path == old
    else:
        assert chosen.path == bundled
        assert chosen.version is not None and chosen.version[0] >= 6


def test_a_password_is_required_and_never_on_the_command_line(tmp_path: Path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path, appendonly=False, password="pw-0123456789abcdef")
    server.start()
    try:
        assert server.process is not None
        cmdline = Path(f"/proc/{server.process.pid}/cmdline").read_bytes()
        assert b"pw-0123456789abcdef" not in cmdline
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=server.port, socket_timeout=5).ping()
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        assert client.ping()
        client.close()
        assert "pw-0123456789abcdef" not in server.address
    finally:
        server.stop()
