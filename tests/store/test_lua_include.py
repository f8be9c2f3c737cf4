"""A script gets the library helpers it uses, transitively, and never fewer."""

from __future__ import annotations

import re

from app.store.lua_include import names_used, splice
from app.store.scripts import load_scripts, lua_dir

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


def test_every_script_defines_every_library_name_it_uses() -> None:
    """What each script names of lib.lua is defined in it: nothing it calls was left out."""
    lib = (lua_dir() / "includes" / "lib.lua").read_text()
    defined = set(re.findall(r"^local (?:function )?([A-Za-z_]\w*)", lib, re.M))
    for name, script in load_scripts().items():
        own = set(re.findall(r"^local (?:function )?([A-Za-z_]\w*)", script.source, re.M))
        assert names_used(script.source) & defined <= own, name


def test_the_claim_carries_none_of_the_create_helpers() -> None:
    claim = load_scripts()["claim_runs"].source
    assert "local function emit(" in claim
    assert "local function create_checked(" not in claim
