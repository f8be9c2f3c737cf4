"""A worker's build id: named by LEASEHOLD_BUILD_ID, else a hash of its handler modules."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.builds import handler_modules_build
from app.settings import Settings


def module_at(tmp_path: Path, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        sys.modules.pop(name, None)
        importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
    return name


def test_the_hash_is_stable_and_moves_with_a_handler_module_s_source(tmp_path: Path) -> None:
    name = module_at(tmp_path, "lh_build_probe", "X = 1\n")
    first = handler_modules_build([name, "app.demo.handlers"])
    # the same modules in another order, or named twice: the same build
    assert handler_modules_build(["app.demo.handlers", name, name]) == first
    assert first.startswith("h-") and len(first) == 18
    module_at(tmp_path, name, "X = 2\n")
    assert handler_modules_build([name, "app.demo.handlers"]) != first
    assert handler_modules_build(["app.demo.handlers"]) != first


@pytest.mark.parametrize("value", ["", "a" * 65, "v1 beta", "vé", "v1/x", "v1\n", "../x"], ids=repr)
def test_a_malformed_build_id_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="build_id"):
        Settings(build_id=value)


def test_a_build_id_is_a_token() -> None:
    assert Settings(build_id="2026.12.07-abc_DEF").build_id == "2026.12.07-abc_DEF"
