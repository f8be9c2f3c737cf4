"""A script gets the include helpers it uses, transitively, never fewer, and lists them all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.store.lua.registry import argument_records
from app.store.lua.scripts import load_scripts, lua_dir, script_files
from app.store.lua.splicing import (
    ArgumentRecords,
    MissingInclude,
    UnknownArgument,
    _library,
    name_arguments,
    names_used,
    splice,
    splice_includes,
)
from tests.support.lua import includes

LIB = """-- lib: header
local function a()
  return 1
end

-- b calls a
local function b()
  return a() + 1
end

local C, D = {}, 2
local function unused()
  return C
end
"""


def test_a_script_gets_what_it_calls_and_what_that_calls() -> None:
    spliced = splice(LIB, "return b()")
    assert "local function a()" in spliced and "local function b()" in spliced
    assert "unused" not in spliced and "local C, D" not in spliced
    assert spliced.startswith("-- lib: header")


def test_one_name_of_a_multiple_definition_keeps_the_definition() -> None:
    assert "local C, D = {}, 2" in splice(LIB, "return D")


def test_names_in_whole_line_comments_do_not_count_but_trailing_ones_do() -> None:
    assert "local function a()" not in splice(LIB, "-- a() is not called here\nreturn 0")
    assert "local function a()" in splice(LIB, "return 0 -- a")
    assert names_used("x = 'a' -- b\n  -- c\n") == {"x", "a", "b"}


def test_a_library_of_another_shape_is_spliced_whole() -> None:
    for odd in (LIB + "print(1)\n", LIB + "local s = [[\nx]]\n", LIB + "local s = 'a\\\n-- b'\n"):
        assert splice(odd, "return 0") == odd


def test_every_script_defines_every_include_name_it_uses() -> None:
    """What each script names of the includes is defined in it: nothing it calls was left out."""
    defined = {
        name
        for text in includes().values()
        for name in re.findall(r"^local (?:function )?([A-Za-z_]\w*)", text, re.M)
    }
    for name, script in load_scripts().items():
        own = set(re.findall(r"^local (?:function )?([A-Za-z_]\w*)", script.source, re.M))
        assert names_used(script.source) & defined <= own, name


def test_a_script_that_does_not_list_an_include_it_uses_is_refused() -> None:
    script = (lua_dir() / "leases" / "append_events-2.lua").read_text()
    assert "--- @include fence\n" in script
    with pytest.raises(MissingInclude, match=r"includes/fence\.lua"):
        splice_includes(script.replace("--- @include fence\n", ""), includes())


def test_an_include_listed_after_the_one_that_uses_it_is_refused() -> None:
    body = "--- @include finalize\n--- @include args\nreturn finalize"
    with pytest.raises(MissingInclude):
        splice_includes(body, includes())


def test_every_script_lists_its_includes_under_its_header_and_each_once() -> None:
    for path in script_files(lua_dir()):
        lines = path.read_text().splitlines()
        listed = [line for line in lines if line.startswith("--- @include ")]
        assert len(listed) == len(set(listed)), path.name
        if listed:
            first = lines.index(listed[0])
            assert lines[first : first + len(listed)] == listed, f"{path.name}: one block"
            assert all(line.startswith("--") for line in lines[:first]), f"{path.name}: header"


def test_each_include_says_what_it_builds_on_and_is_one_concept_of_bounded_size() -> None:
    texts = includes()
    defined = {name: set(_library(text).defined) for name, text in texts.items()}  # type: ignore[union-attr]
    for name, text in texts.items():
        said = re.search(r"^-- Builds on: (?P<names>[^.]+)\.$", text, re.M)
        assert said, f"includes/{name}.lua says nothing of what it builds on"
        built_on = [] if said["names"] == "nothing" else said["names"].split(", ")
        used = names_used(text) - defined[name]
        assert sorted(built_on) == sorted(o for o in texts if o != name and used & defined[o]), name
        assert len(text.splitlines()) < 400, f"includes/{name}.lua is no longer one concept"


def test_the_claim_carries_none_of_the_create_helpers() -> None:
    claim = load_scripts()["claim_runs"].source
    assert "local function emit(" in claim
    assert "local function create_checked(" not in claim


RECORDS = ArgumentRecords(
    fixed=("owner_id", "lease_ttl_ms", "groups"),
    records={"RenewArgs": ("owner_id", "lease_ttl_ms", "groups"), "LeaseGroup": ("id", "fence")},
)


def test_arguments_named_in_a_script_become_their_positions() -> None:
    text = (
        "check_argc(@groups - 1)\nlocal owner = ARGV[@owner_id]\n"
        "for i = @groups, #ARGV, @LeaseGroup do\n  f(ARGV[i + @LeaseGroup.id], "
        "ARGV[i + @LeaseGroup.fence])\nend\n-- @owner_id stays in a comment\n"
    )
    assert name_arguments(text, RECORDS) == (
        "check_argc(3 - 1)\nlocal owner = ARGV[1]\n"
        "for i = 3, #ARGV, 2 do\n  f(ARGV[i], ARGV[i + 1])\nend\n"
        "-- @owner_id stays in a comment\n"
    )


@pytest.mark.parametrize("name", ["@owner", "@LeaseGroup.owner_id", "@Nope.id", "@Lease"])
def test_a_name_the_binding_does_not_have_is_refused(name: str) -> None:
    with pytest.raises(UnknownArgument):
        name_arguments(f"return ARGV[{name}]", RECORDS)


def test_a_field_renamed_in_a_binding_fails_the_load_of_its_script(tmp_path: Path) -> None:
    arguments = argument_records()
    renew = arguments["renew_leases"]
    renamed = ArgumentRecords(
        fixed=tuple("owner" if f == "owner_id" else f for f in renew.fixed),
        records={
            n: tuple("owner" if f == "owner_id" else f for f in fs)
            for n, fs in renew.records.items()
        },
    )
    with pytest.raises(UnknownArgument, match=r"renew_leases: @owner_id"):
        load_scripts(arguments={**arguments, "renew_leases": renamed})
