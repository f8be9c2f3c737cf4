"""A start reads the splice an earlier start made, and only if it was made of the same files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.store.lua import spliced_cache
from app.store.lua import splicing as lua_include
from app.store.lua.registry import argument_records
from app.store.lua.scripts import Script, load_scripts, lua_dir, script_files
from app.store.lua.splicing import name_arguments, splice_includes


@pytest.fixture
def scripts_dir(tmp_path: Path) -> Path:
    """A copy of the transitions and their includes, without a cache."""
    copy = tmp_path / "lua"
    shutil.copytree(lua_dir(), copy, ignore=shutil.ignore_patterns(spliced_cache.CACHE_DIR))
    return copy


def cache_file(directory: Path) -> Path:
    return directory / spliced_cache.CACHE_DIR / spliced_cache.CACHE_FILE


def spliced_afresh(directory: Path) -> dict[str, str]:
    """Every script's body, spliced and its argument names made numbers, without the cache."""
    includes = {path.stem: path.read_text() for path in (directory / "includes").glob("*.lua")}
    arguments = argument_records()
    bodies = {}
    for path in script_files(directory):
        name = path.name.rsplit("-", 1)[0]
        body = splice_includes(path.read_text(), includes)
        bodies[name] = name_arguments(body, arguments[name]) if name in arguments else body
    return bodies


def bodies(scripts: dict[str, Script]) -> dict[str, str]:
    return {name: script.legacy_source for name, script in scripts.items()}


def test_a_second_load_reads_the_cache_and_gets_what_splicing_gives(scripts_dir: Path) -> None:
    first = load_scripts(scripts_dir)
    assert cache_file(scripts_dir).is_file()
    cached = json.loads(cache_file(scripts_dir).read_text())
    assert cached["bodies"] == bodies(first)
    second = load_scripts(scripts_dir)
    assert second == first
    assert bodies(second) == spliced_afresh(scripts_dir)


def test_a_cache_is_used_only_for_the_files_it_was_made_of(scripts_dir: Path) -> None:
    load_scripts(scripts_dir)
    # a forged cache under the right key is what a load returns: the key is what is checked
    cached = json.loads(cache_file(scripts_dir).read_text())
    cached["bodies"]["create_run"] = "return 'from the cache'"
    cache_file(scripts_dir).write_text(json.dumps(cached))
    assert load_scripts(scripts_dir)["create_run"].legacy_source == "return 'from the cache'"
    # one byte of one script changes the key: that script, and every other, is spliced anew
    script = scripts_dir / "runs" / "create_run-6.lua"
    script.write_text(script.read_text() + "-- edited\n")
    reloaded = load_scripts(scripts_dir)
    assert reloaded["create_run"].legacy_source.endswith("-- edited\n")
    assert bodies(reloaded) == spliced_afresh(scripts_dir)


def test_an_edited_include_is_spliced_into_every_script_anew(scripts_dir: Path) -> None:
    before = load_scripts(scripts_dir)
    args = scripts_dir / "includes" / "args.lua"
    text = args.read_text()
    # a helper every script that includes args uses: the edit must show up in each of them
    assert "local function bad_argument(" in text
    edited = text.replace("local function bad_argument(", "local function bad_argument( ", 1)
    args.write_text(edited)
    after = load_scripts(scripts_dir)
    changed = [name for name in before if after[name].sha != before[name].sha]
    assert changed and all("bad_argument( " in after[name].source for name in changed)
    assert bodies(after) == spliced_afresh(scripts_dir)


def test_a_change_to_the_splicing_code_is_a_different_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts, includes = {"a": "return 1\n"}, {"lib": "local x = 1\n"}
    before = spliced_cache.key(texts, includes)
    changed = tmp_path / "lua_include.py"
    changed.write_bytes(Path(lua_include.__file__).read_bytes() + b"\n# another rule\n")
    monkeypatch.setattr(lua_include, "__file__", str(changed))
    assert spliced_cache.key(texts, includes) != before


@pytest.mark.parametrize(
    "damage",
    ["", "{not json", "[]", '{"key": 1}', '{"key": "%s", "bodies": {"create_run": 3}}'],
    ids=["empty", "truncated", "a list", "a key of another type", "a body of another type"],
)
def test_a_damaged_cache_is_ignored_and_written_again(scripts_dir: Path, damage: str) -> None:
    expected = load_scripts(scripts_dir)
    made_of = json.loads(cache_file(scripts_dir).read_text())["key"]
    cache_file(scripts_dir).write_text(damage.replace("%s", made_of))
    assert load_scripts(scripts_dir) == expected
    assert json.loads(cache_file(scripts_dir).read_text())["bodies"] == bodies(expected)


def test_a_cache_missing_a_script_is_not_used(scripts_dir: Path) -> None:
    expected = load_scripts(scripts_dir)
    cached = json.loads(cache_file(scripts_dir).read_text())
    del cached["bodies"]["create_run"]
    cache_file(scripts_dir).write_text(json.dumps(cached))
    assert load_scripts(scripts_dir) == expected


def test_a_directory_that_cannot_take_a_cache_still_loads_every_script(scripts_dir: Path) -> None:
    # where __pycache__ cannot be made (here a file is in its place; in an image, a
    # package that belongs to root) every start splices, as before
    (scripts_dir / spliced_cache.CACHE_DIR).write_text("not a directory")
    assert bodies(load_scripts(scripts_dir)) == spliced_afresh(scripts_dir)
    assert (scripts_dir / spliced_cache.CACHE_DIR).read_text() == "not a directory"


def test_a_script_naming_a_missing_include_is_refused(scripts_dir: Path) -> None:
    (scripts_dir / "runs" / "extra_script-1.lua").write_text("--- @include nowhere\nreturn 1\n")
    with pytest.raises(FileNotFoundError, match=r"includes/nowhere\.lua"):
        load_scripts(scripts_dir)
