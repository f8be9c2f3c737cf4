"""The rooms' layers hold: import-linter checks the contracts in pyproject.toml.

An import the wrong way (the API reaching into the executor, the store into the
API, the settings into the store, a benchmark into the tests, a cycle between
the modules of one room) fails here with import-linter's report of the arrow,
file and line. README "Architecture" says what each room owns.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    contracts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # every contract was checked, none skipped
    assert f"Contracts: {len(contracts)} kept, 0 broken." in result.stdout, result.stdout
