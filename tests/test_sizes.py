"""Size limits (issue 34): a function a reader can hold in view, a file that is one concept.

* No function over 80 lines, in Python (every ``def`` in ``app/``, by :mod:`ast`, from
  its ``def`` line to its last; a nested function counts inside its parent too) or in
  Lua (every function in ``scripts/lua/``, local, global or anonymous, at any
  indentation, from ``function`` to its ``end``).
* No Lua chunk over 80 lines either: a script's top-level body is the transition's
  function, the one Redis runs at every call, and is held to the same limit. It is
  measured from the chunk's first line of code to its last, the comments and blank
  lines between included and every function's lines left out (the header and the
  ``@include`` list above the code are not counted).
* No Python module in ``app/`` over 600 lines, no Lua file over 400.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
LUA = ROOT / "scripts" / "lua"

MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600
MAX_LUA_FILE_LINES = 400

_LONG_BRACKET = re.compile(r"\[(=*)\[")
_BLOCK_WORD = re.compile(r"\b(function|if|do|repeat|end|until)\b")
_FUNCTION_NAME = re.compile(r"\s*([\w.:]+)")


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _python_modules() -> list[Path]:
    return sorted(APP.rglob("*.py"))


def _lua_files() -> list[Path]:
    return sorted(LUA.rglob("*.lua"))


def python_functions(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, line count) of every function and method in ``source``."""
    return [
        (node.name, node.lineno, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def _end_of_long_bracket(code: str, opening: re.Match[str]) -> int:
    closing = code.find("]" + opening.group(1) + "]", opening.end())
    return len(code) if closing < 0 else closing + len(opening.group(1)) + 2


def _end_of_line(code: str, start: int) -> int:
    newline = code.find("\n", start)
    return len(code) if newline < 0 else newline


def _end_of_quoted(code: str, start: int) -> int:
    quote, end = code[start], start + 1
    while end < len(code) and code[end] != quote:
        end += 2 if code[end] == "\\" else 1
    return end + 1


def _code_only(source: str) -> str:
    """``source`` with its comments and strings blanked out, its line breaks kept: what
    is left of a keyword is a keyword."""
    kept: list[str] = []
    at = 0
    while at < len(source):
        if source.startswith("--", at):
            opening = _LONG_BRACKET.match(source, at + 2)
            end = _end_of_long_bracket(source, opening) if opening else _end_of_line(source, at)
        elif opening := _LONG_BRACKET.match(source, at):
            end = _end_of_long_bracket(source, opening)
        elif source[at] in "'\"":
            end = _end_of_quoted(source, at)
        else:
            kept.append(source[at])
            at += 1
            continue
        kept.append(re.sub(r"[^\n]", " ", source[at:end]))
        at = end
    return "".join(kept)


def lua_functions(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, line count) of every function in ``source``; ``(anonymous)``
    for ``function (...)``. Blocks open at ``function``, ``if``, ``do`` (which ``for`` and
    ``while`` use) and ``repeat``; ``end`` and ``until`` close them."""
    code = _code_only(source)
    open_blocks: list[tuple[str, str, int]] = []
    found: list[tuple[str, int, int]] = []
    for word in _BLOCK_WORD.finditer(code):
        line = code.count("\n", 0, word.start()) + 1
        if word.group(1) in ("end", "until"):
            kind, name, first = open_blocks.pop()
            if kind == "function":
                found.append((name, first, line - first + 1))
            continue
        named = _FUNCTION_NAME.match(code, word.end()) if word.group(1) == "function" else None
        open_blocks.append((word.group(1), named.group(1) if named else "(anonymous)", line))
    assert not open_blocks, f"unclosed blocks: {open_blocks}"
    return found


def lua_top_level_lines(source: str) -> int:
    """Lines of ``source``'s chunk outside every function, from its first line of code to
    its last: the comments and blank lines between count, the header above does not."""
    inside = {
        line for _, first, count in lua_functions(source) for line in range(first, first + count)
    }
    code = [
        number
        for number, line in enumerate(_code_only(source).splitlines(), 1)
        if line.strip() and number not in inside
    ]
    if not code:
        return 0
    return sum(1 for number in range(code[0], code[-1] + 1) if number not in inside)


def _functions_over_the_limit(
    paths: list[Path], measure: Callable[[str], list[tuple[str, int, int]]]
) -> list[str]:
    return [
        f"{_relative(path)}:{first} {name} ({lines} lines)"
        for path in paths
        for name, first, lines in measure(path.read_text(encoding="utf-8"))
        if lines > MAX_FUNCTION_LINES
    ]


def test_no_python_function_in_app_is_over_80_lines() -> None:
    too_long = _functions_over_the_limit(_python_modules(), python_functions)
    assert not too_long, f"split these into functions of one job each: {too_long}"


def test_no_lua_function_is_over_80_lines() -> None:
    too_long = _functions_over_the_limit(_lua_files(), lua_functions)
    assert not too_long, f"split these into functions of one job each: {too_long}"


def test_no_lua_script_body_is_over_80_lines() -> None:
    too_long = [
        f"{_relative(path)} ({lines} lines outside its functions)"
        for path in _lua_files()
        if (lines := lua_top_level_lines(path.read_text(encoding="utf-8"))) > MAX_FUNCTION_LINES
    ]
    assert not too_long, f"cut these bodies into named local functions: {too_long}"


def test_no_python_module_in_app_is_over_600_lines() -> None:
    too_long = [
        f"{_relative(path)} ({_line_count(path)} lines)"
        for path in _python_modules()
        if _line_count(path) > MAX_MODULE_LINES
    ]
    assert not too_long, f"move a concept of each into a module of its own: {too_long}"


def test_no_lua_file_is_over_400_lines() -> None:
    too_long = [
        f"{_relative(path)} ({_line_count(path)} lines)"
        for path in _lua_files()
        if _line_count(path) > MAX_LUA_FILE_LINES
    ]
    assert not too_long, f"cut these by concept: {too_long}"


def test_the_lua_measure_reads_blocks_past_strings_and_comments() -> None:
    body = "\n".join(f"  x = x + {n}" for n in range(76))
    source = f"""-- a header that says function and if
function M.short(t)
  for _, v in ipairs(t) do
    if v then
      repeat v = v - 1 until v <= 0
    elseif v == nil then
      local f = function(a) return a end
    else
      while false do end
    end
  end
end
--[[ function
never_counted() end ]]
local function long_one(x)
  local s = 'it\\'s end' .. "function" .. [[
end ]] .. [==[ do ]==]
{body}
  return x
end
"""
    assert lua_functions(source) == [
        ("(anonymous)", 7, 1),
        ("M.short", 2, 11),
        ("long_one", 15, MAX_FUNCTION_LINES + 1),
    ]


def test_the_lua_body_measure_leaves_out_the_header_and_every_function() -> None:
    source = """-- header: KEYS, ARGV
--- @include args

check_argc(2)
local function helper(x)
  local f = function() return x end
  return f()
end
-- why the next step

local y = helper(1)
return y
-- a trailing comment is not code
"""
    assert lua_top_level_lines(source) == 5  # check_argc, the comment, blank, local y, return
