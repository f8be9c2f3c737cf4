"""``leasehold up``'s address book read with suspicion: stale, corrupt, unreadable, not ours.

The process-level side (a worker refusing a stale book, a client joining a live one)
is in tests/process/test_first_day.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import Settings
from app.stack.address_book import (
    API_URL,
    REDIS_URL,
    UnusableBook,
    read_book,
    stack_settings,
    write_book,
)
from app.stack.embedded import free_port

BOOK_SETTINGS = {REDIS_URL: "redis://:pw@127.0.0.1:1/0", API_URL: "http://127.0.0.1:8011"}


def written(path: Path, **settings: str) -> Path:
    write_book(
        path,
        pid=os.getpid(),
        directory=path.parent,
        embedded_redis=True,
        settings=BOOK_SETTINGS | settings,
    )
    return path


def test_a_book_is_written_private_and_read_back_whole(tmp_path: Path) -> None:
    path = written(tmp_path / "state" / "stack.json", LEASEHOLD_LEASE_TTL_S="5.0")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert list(path.parent.iterdir()) == [path]  # no temporary file left beside it
    book = read_book(path)
    assert book is not None
    assert book.pid == os.getpid() and book.up_alive()
    assert book.settings[REDIS_URL] == "redis://:pw@127.0.0.1:1/0"
    assert book.settings["LEASEHOLD_LEASE_TTL_S"] == "5.0"
    assert "pw" not in book.describe()
    assert book.describe() == (
        f"using the stack started by `leasehold up` in {tmp_path / 'state'}: "
        "API http://127.0.0.1:8011, Redis redis://:***@127.0.0.1:1/0"
    )


def test_rewriting_an_old_readable_book_leaves_a_private_one(tmp_path: Path) -> None:
    path = tmp_path / "stack.json"
    path.write_text("{}")
    path.chmod(0o644)
    written(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_no_book_is_none(tmp_path: Path) -> None:
    assert read_book(tmp_path / "stack.json") is None
    assert read_book(tmp_path / "missing-dir" / "stack.json") is None


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("", "is not JSON"),
        ("{not json", "is not JSON"),
        ("\udcff".encode("utf-8", "surrogateescape").decode("latin-1"), "is not JSON"),
        ("[]", "is not a version-1"),
        ('{"version": 2}', "is not a version-1"),
        ('{"version": 1}', "its pid is not a process id"),
        ('{"version": 1, "pid": true}', "its pid is not a process id"),
        ('{"version": 1, "pid": -4}', "its pid is not a process id"),
        ('{"version": 1, "pid": 4, "directory": ""}', "names no directory"),
        ('{"version": 1, "pid": 4, "directory": "/x", "embedded_redis": 1}', "embedded_redis"),
        (
            '{"version": 1, "pid": 4, "directory": "/x", "embedded_redis": true, "settings": '
            '{"LEASEHOLD_REDIS_URL": "redis://h:1/0"}}',
            "LEASEHOLD_API_URL",
        ),
        (
            '{"version": 1, "pid": 4, "directory": "/x", "embedded_redis": true, "settings": '
            '{"PATH": "/evil", "LEASEHOLD_REDIS_URL": "r", "LEASEHOLD_API_URL": "a"}}',
            r"LEASEHOLD_\* strings",
        ),
        (
            '{"version": 1, "pid": 4, "directory": "/x", "embedded_redis": true, "settings": '
            '{"LEASEHOLD_REDIS_URL": 1, "LEASEHOLD_API_URL": "a"}}',
            r"LEASEHOLD_\* strings",
        ),
    ],
)
def test_a_corrupt_book_is_refused_with_the_reason(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "stack.json"
    path.write_text(content, encoding="latin-1")
    path.chmod(0o600)
    with pytest.raises(UnusableBook, match=says):
        read_book(path)


def test_a_huge_book_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "stack.json"
    path.write_text(" " * 10_000_000)
    path.chmod(0o600)
    with pytest.raises(UnusableBook, match="10000000 bytes"):
        read_book(path)


def test_a_book_others_can_read_or_write_is_refused(tmp_path: Path) -> None:
    path = written(tmp_path / "stack.json")
    path.chmod(0o644)
    with pytest.raises(UnusableBook, match="mode 0o644: others could read or change it"):
        read_book(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_book_of_another_user_is_refused(tmp_path: Path) -> None:
    # whoever plants a book could point this user's commands, and the key they send, anywhere
    path = written(tmp_path / "stack.json")
    os.chown(path, 65534, 65534)
    with pytest.raises(UnusableBook, match="belongs to another user"):
        read_book(path)


def test_a_book_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "stack.json"
    directory.mkdir(mode=0o700)
    with pytest.raises(UnusableBook):
        read_book(directory)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo, 0o600)  # opening it must not wait for a writer
    with pytest.raises(UnusableBook, match="not a regular file"):
        read_book(fifo)


def test_a_symlinked_book_is_not_followed(tmp_path: Path) -> None:
    real = written(tmp_path / "elsewhere.json")
    link = tmp_path / "stack.json"
    link.symlink_to(real)
    with pytest.raises(UnusableBook, match="cannot read"):
        read_book(link)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_book_is_refused(tmp_path: Path) -> None:
    path = written(tmp_path / "stack.json")
    path.chmod(0o000)
    with pytest.raises(UnusableBook, match="cannot read"):
        read_book(path)


def test_a_dead_up_and_a_dead_redis_are_told_apart_from_live_ones(
    tmp_path: Path, redis_url: str
) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    path = tmp_path / "stack.json"
    write_book(
        path,
        pid=int(gone.stdout),
        directory=tmp_path,
        embedded_redis=True,
        settings={REDIS_URL: f"redis://:pw@127.0.0.1:{free_port()}/0", API_URL: "http://x"},
    )
    dead = read_book(path)
    assert dead is not None
    assert not dead.up_alive()
    assert not dead.redis_answers(timeout_s=0.5)
    live = written(path, **{REDIS_URL: redis_url})
    book = read_book(live)
    assert book is not None and book.redis_answers()


def test_the_book_holds_what_the_user_set_but_never_a_process_own_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        lease_ttl_s=5,
        queues=["default", "mail"],
        handlers=["app.demo", "mypkg.handlers"],
        op_lease_s={"model_call": 30},
        reconciler_enabled=False,
        api_port=8011,
        worker_metrics_port=9100,
        state_dir=tmp_path,
        app_dir=tmp_path,
    )
    values = stack_settings(settings, redis_url="redis://:pw@h:1/0", api_url="http://h:8011")
    assert values == {
        "LEASEHOLD_REDIS_URL": "redis://:pw@h:1/0",
        "LEASEHOLD_API_URL": "http://h:8011",
        "LEASEHOLD_LEASE_TTL_S": "5.0",
        "LEASEHOLD_QUEUES": "default,mail",
        "LEASEHOLD_HANDLERS": "app.demo,mypkg.handlers",
        "LEASEHOLD_OP_LEASE_S": json.dumps({"model_call": 30.0}),
        "LEASEHOLD_RECONCILER_ENABLED": "false",
        "LEASEHOLD_APP_DIR": str(tmp_path.resolve()),
    }
    # and each value reads back from the environment as the same setting
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    again = Settings()
    for name in ("lease_ttl_s", "queues", "handlers", "op_lease_s", "reconciler_enabled"):
        assert getattr(again, name) == getattr(settings, name)
