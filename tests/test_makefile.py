"""`make clean` leaves the checkout as a fresh clone: every cache the tools and tests write."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT

# what `make install`, the linters, pytest (with hypothesis), the console's screenshots
# and `leasehold up` leave behind
GENERATED = [
    ".venv",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".leasehold",
    ".hypothesis",
    "test-artifacts",
]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_clean_removes_every_generated_directory(tmp_path: Path) -> None:
    shutil.copy(REPO_ROOT / "Makefile", tmp_path / "Makefile")
    for name in GENERATED:
        (tmp_path / name).mkdir()
        (tmp_path / name / "left-over").write_text("x")
    (tmp_path / "app" / "__pycache__").mkdir(parents=True)  # `make install`'s bytecode
    (tmp_path / "app" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"x")
    (tmp_path / "app" / "cli.py").write_text("")  # and nothing else goes
    result = subprocess.run(
        ["make", "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert [name for name in GENERATED if (tmp_path / name).exists()] == []
    assert (tmp_path / "app" / "cli.py").is_file()
    assert not (tmp_path / "app" / "__pycache__").exists()
