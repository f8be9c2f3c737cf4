"""The rooms' layers hold: import-linter checks the contracts in pyproject.toml.

An import the wrong way (the API reaching into the executor, the store into the
API, the settings into the store, a benchmark into the tests, a cycle between
the modules of one room) fails here with import-linter's report of the arrow,
file and line. README "Architecture" says what each room owns.
"""

from __future__ import annotations

import ast
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


def test_script_status_codes_stay_inside_the_store() -> None:
    """Only app/store reads a Lua script's raw answer: everyone else gets typed results.

    The store maps a script's code to an exception (``RunNotFound``,
    ``InvalidTransition``, ``LeaseLost``) or a typed answer (``LeaseAnswer``,
    ``EffectAnswer``); ``ScriptCode`` imported anywhere else is an arrow the wrong way.
    """
    leaks = []
    for path in sorted((REPO_ROOT / "app").rglob("*.py")):
        if (REPO_ROOT / "app" / "store") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and any(
                alias.name == "ScriptCode" for alias in node.names
            ):
                leaks.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert leaks == []
