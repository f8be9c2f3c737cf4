"""Every Lua script documents its contract in a header; these tests keep it honest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.store.lua.registry import every_transition
from app.store.lua.scripts import ScriptCode, load_scripts, lua_dir, script_files
from tests.support.lua import include, includes

SCRIPT_FILES = script_files(lua_dir())
INCLUDES = lua_dir() / "includes"
NAME = re.compile(r"^(?P<name>[a-z_]+)-(?P<numkeys>\d+)\.lua$")


def header(path: Path) -> list[str]:
    """The leading comment block of a script."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return lines


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_header_names_the_transition_of_its_file(path: Path) -> None:
    match = NAME.match(path.name)
    assert match, f"{path.name} is not <transition>-<keys>.lua"
    assert header(path)[0].startswith(f"-- {match['name']}: ")


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_header_lists_exactly_the_keys_its_file_name_counts(path: Path) -> None:
    match = NAME.match(path.name)
    assert match
    declared = [int(m) for m in re.findall(r"^-- KEYS\[(\d+)\]", "\n".join(header(path)), re.M)]
    assert declared == list(range(1, int(match["numkeys"]) + 1))
    body = path.read_text()
    used = {int(m) for m in re.findall(r"KEYS\[(\d+)\]", body)}
    assert used <= set(declared), "the script uses a KEYS index its header does not declare"


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_header_return_codes_are_the_ones_python_knows(path: Path) -> None:
    text = "\n".join(header(path))
    returns = text[text.index("-- returns") : text.index("-- events")]
    documented = set(re.findall(r"\b([A-Z][A-Z_]{1,})\b", returns)) - {"KEYS", "ARGV"}
    assert documented, "the header names no return code"
    assert documented <= {code.value for code in ScriptCode}
    known = {code.value for code in ScriptCode}
    returned = set(re.findall(r"'([A-Z][A-Z_]+)'", path.read_text())) & known
    assert returned <= documented, f"codes returned but not documented: {returned - documented}"


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_header_states_events_and_invariant(path: Path) -> None:
    text = "\n".join(header(path))
    assert "-- events" in text
    assert "-- invariant" in text


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_header_states_how_it_validates_before_it_writes(path: Path) -> None:
    """Redis never rolls a script back: each header says how every check precedes a write."""
    text = "\n".join(header(path))
    assert re.search(r"^-- validate-then-write: \S", text, re.M), (
        f"{path.name}: no '-- validate-then-write:' line in the header"
    )


# a write: any Redis command not known to be a read (so a write command nobody listed
# still counts: HSETNX once slipped past a list of writes), or a call of an include's
# helper that writes (found in the old lib.lua itself: count_outcome was missing from a list)
_READS = (
    "GET|HGET|HMGET|HGETALL|HEXISTS|HLEN|EXISTS|PTTL|TTL|TYPE|TIME|SCARD|SISMEMBER|SMEMBERS"
    "|ZCARD|ZCOUNT|ZRANGE|ZRANGEBYSCORE|ZREVRANGE|ZSCORE|LLEN|LRANGE|LINDEX|LPOS|XLEN|XRANGE"
    "|XREVRANGE|XINFO|STRLEN"
)
_COMMAND_WRITE = rf"redis\.p?call\('(?!(?:{_READS})')[A-Z]+'"


def _lib_writers() -> list[str]:
    """The include functions that write, directly or through another such function."""
    lib = "".join(includes().values())
    bodies = dict(re.findall(r"(?ms)^(?:local )?function ([a-z_]+)\((.*?)^end\b", lib))
    writers: set[str] = set()
    while True:
        calls = rf"\b({'|'.join(writers)})\(" if writers else None
        found = {
            name
            for name, body in bodies.items()
            if re.search(_COMMAND_WRITE, body) or (calls and re.search(calls, body))
        }
        if found == writers:
            return sorted(writers)
        writers = found


_WRITE = re.compile(rf"{_COMMAND_WRITE}|\b({'|'.join(_lib_writers())})\(")


def test_the_write_pattern_knows_the_helpers_that_write() -> None:
    """The derived list holds every helper the earlier hand-kept list named, and more."""
    named = {"emit", "finalize", "park", "make_ready", "set_open_effects", "xadd_event"}
    assert named | {"count_outcome", "require_reconciliation"} <= set(_lib_writers())
    assert _WRITE.search("redis.call('HSETNX', run_key, 'x', 1)")
    assert not _WRITE.search("redis.call('HGET', run_key, 'status')")


# what can raise on input: a decode, an argument check, a number read from ARGV
_MAY_RAISE = re.compile(
    r"cjson\.decode\(|\b(json_arg|int_arg|enum_arg|retention_arg|run_id_arg|check_argc"
    r"|check_groups|open_effects|unknown_effects)\(|tonumber\(ARGV"
)


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_nothing_that_may_raise_comes_after_the_first_write_in_the_text(path: Path) -> None:
    """A textual complement to the worst-argument test: no decode or check below the first write.

    Text order is not execution order (a branch that writes may return), so a script
    keeps even its branches' reads above the first write; cjson.encode of values the
    script checked itself is allowed.
    """
    code = [
        (number, line)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if not line.lstrip().startswith("--")
    ]
    first = next((number for number, line in code if _WRITE.search(line)), None)
    late = [
        f"{number}: {line.strip()}"
        for number, line in code
        if first and number > first and _MAY_RAISE.search(line)
    ]
    assert late == [], f"{path.name}: first write on line {first}, then {late}"


def test_no_script_takes_a_time_from_its_caller() -> None:
    """Lease decisions use the Redis clock: no ARGV is a point in time."""
    for path in SCRIPT_FILES:
        argv = [line for line in header(path) if line.startswith("-- ARGV")]
        for line in argv:
            name = line.split()[2]
            assert not name.endswith("_at") and "now" not in name, f"{path.name}: {line}"
    assert "redis.call('TIME')" in include("args")


def test_every_script_loads_with_its_includes_spliced_in() -> None:
    scripts = load_scripts()
    assert {path.name.split("-")[0] for path in SCRIPT_FILES} == set(scripts)
    for script in scripts.values():
        assert not re.search(r"^--- @include", script.source, re.M)


def _argv_header(path: Path) -> tuple[list[str], list[str], list[str]]:
    """The header's fixed ARGV names in order, the names of a ``ARGV[n..]`` group, and of
    the records a segment's last field counts (a line ``-- <that field>  names``)."""
    fixed: list[str] = []
    group: list[str] = []
    subgroup: list[str] = []
    for line in header(path):
        if group:
            sub = re.match(rf"^-- {re.escape(group[-1])}\s{{2,}}(.*?)(?:\s{{2,}}|$)", line)
            if sub:
                subgroup = [name.strip() for name in sub[1].split(",")]
                continue
        numbered = re.match(r"^-- ARGV\[(\d+)\]\s+(\S+)", line)
        if numbered:
            assert int(numbered[1]) == len(fixed) + 1, f"{path.name}: {line}"
            fixed.append(numbered[2])
            continue
        tail = re.match(r"^-- ARGV\[(\d+)\.\.\]\s+(.*?)(?:\s{2,}|$)", line)
        if tail:
            assert int(tail[1]) == len(fixed) + 1, f"{path.name}: {line}"
            group = [name.strip() for name in tail[2].split(",")]
    return fixed, group, subgroup


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_the_binding_names_the_header_argv_in_order(path: Path) -> None:
    """The ARGV record's fields are the header's names, in order: the record IS the order."""
    match = NAME.match(path.name)
    assert match
    binding = every_transition()[match["name"]]
    fixed, group, subgroup = _argv_header(path)
    fields = list(getattr(binding.argv, "_fields"))  # noqa: B009  # a NamedTuple's
    if binding.subgroup is not None:
        assert binding.group is not None
        # segments: the header names the group's record, whose fields are the one list
        assert group == [f"{binding.group.__name__} segments"], path.name
        group = list(getattr(binding.group, "_fields"))  # noqa: B009
    else:
        assert subgroup == [], f"{path.name}: the header has ARGV segments, the binding none"
    if binding.group is not None:
        assert fields[-1] == "groups", f"{path.name}: a grouped record ends with `groups`"
        if binding.subgroup is None:
            assert list(getattr(binding.group, "_fields")) == group, path.name  # noqa: B009
        fields = fields[:-1]
    else:
        assert group == [], f"{path.name}: the header has ARGV groups, the binding none"
    assert fields == fixed, path.name


@pytest.mark.parametrize("path", [*SCRIPT_FILES, *sorted(INCLUDES.glob("*.lua"))], ids=str)
def test_arguments_are_read_by_name_never_by_position(path: Path) -> None:
    """``ARGV[@owner_id]``, ``ARGV[i + @LeaseGroup.fence]``, ``check_argc(@RenewArgs)``:
    the binding's record is the one field list, so no code line holds a literal index."""
    code = [line.partition("--")[0] for line in path.read_text().splitlines()]
    literal = [line.strip() for line in code if re.search(r"ARGV\[\s*\d|check_argc\(\d", line)]
    assert literal == [], path.name


def test_every_script_has_one_binding_and_every_binding_a_script() -> None:
    bindings = every_transition()
    assert set(bindings) == set(load_scripts())
    assert all(name == binding.name for name, binding in bindings.items())


def test_each_binding_lives_in_the_room_of_its_scripts_folder() -> None:
    """Python and Lua side by side in name: scripts/lua/<room>/ and app/store/<room>/."""
    bindings = every_transition()
    for path in SCRIPT_FILES:
        binding = bindings[path.name.split("-")[0]]
        assert binding.argv.__module__ == f"app.store.{path.parent.name}.bindings", path.name
