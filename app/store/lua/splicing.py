"""Splices the includes a script lists into it, with only the helpers it uses.

A script lists the include files it uses right under its header, one
``--- @include <name>`` line each (``includes/<name>.lua``: ``args``, ``keys``,
``events``, ``lanes``, ``finalize``, ... one concept each), a file before those
that build on it; each include's header says what it builds on. Splicing checks
the list is complete: a helper the spliced script names that only an unlisted
include defines is a :class:`MissingInclude` (a script would otherwise fail at run
time, on that path only, calling a nil global).

Redis runs a script's top level at every EVALSHA: each ``local function`` of the
library is a new closure at every call, whether the script calls it or not. The
whole of the old lib.lua (~70 helpers) cost ~76k redis-server instructions per call
(callgrind: ``return 1`` with and without it), more than a claimed run's own Lua.
So a script gets the library's definitions its own code names, and those they
name, transitively, in the library's order: what it runs is unchanged.

Kept on purpose conservative, so that a helper a script calls can never be left
out: a name counts as used wherever it appears in code (a field, a string, a
comment at the end of a line included); only whole-line comments are skipped.
The library's top level must be ``local`` definitions (and comments); a line of
any other kind, a long bracket (``[[``) or a line ending in a backslash (a string
going on to the next line, whose ``--`` could look like a comment) makes the
whole library included, as before.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_DEFINITION = re.compile(
    r"^local\s+(?:function\s+(?P<function>[A-Za-z_]\w*)"
    r"|(?P<names>[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=)"
)
_NAME = re.compile(r"[A-Za-z_]\w*")
_COMMENT_LINE = re.compile(r"^\s*--")
_INCLUDE = re.compile(r"^--- @include (?P<name>[a-z_]+)$", re.MULTILINE)


class MissingInclude(ValueError):
    """A script names a helper of an include it does not list (or lists after its user)."""


@dataclass(frozen=True)
class ArgumentRecords:
    """A script's ARGV record and the records of its groups, as its binding declares them.

    ``fixed``: the ARGV record's fields in ARGV order (a grouped record's last,
    ``groups``, is where its groups start); ``records``: each record's fields by class
    name (the ARGV record, its group and subgroup).
    """

    fixed: tuple[str, ...]
    records: dict[str, tuple[str, ...]]

    def constant(self, name: str, field: str | None) -> int:
        """The number ``@name`` or ``@Record.field`` stands for; KeyError names what is wrong.

        ``@field``: a fixed field's ARGV index (1-based, ``@groups``: where groups
        start); ``@Record``: how many fields the record has (a group's stride);
        ``@Record.field``: the field's offset in its record (0-based, added to the index
        of the record's first field).
        """
        if field is not None:
            fields = self.records.get(name)
            if fields is None or field not in fields:
                raise KeyError(f"@{name}.{field}: no such record field")
            return fields.index(field)
        if name in self.fixed:
            return self.fixed.index(name) + 1
        if name in self.records:
            return len(self.records[name])
        raise KeyError(f"@{name}: neither an ARGV field nor a record of this script")


_ZERO_OFFSET = re.compile(r"\s*\+\s*0\]")
_ARGUMENT = re.compile(r"@(?P<name>[A-Za-z_]\w*)(?:\.(?P<field>[A-Za-z_]\w*))?")


def name_arguments(text: str, arguments: ArgumentRecords) -> str:
    """``text`` with every ``@field``, ``@Record`` and ``@Record.field`` made its number.

    Scripts read ARGV by field name (``ARGV[@owner_id]``, ``ARGV[i + @LeaseGroup.fence]``);
    the names are the binding's record's, so the record is the one field list, and
    what Redis runs is the same positional code as before: a name costs nothing.
    Raises :class:`UnknownArgument` for a name the records do not have.
    """

    def number(match: re.Match[str]) -> str:
        try:
            return str(arguments.constant(match["name"], match["field"]))
        except KeyError as exc:
            raise UnknownArgument(exc.args[0]) from None

    # whole-line comments keep their names: they document, Redis never runs them; a
    # record's first field is offset 0, and `ARGV[i + 0]` is left as `ARGV[i]`
    lines = text.splitlines(keepends=True)
    return "".join(
        line
        if _COMMENT_LINE.match(line) or "@" not in line
        else _ZERO_OFFSET.sub("]", _ARGUMENT.sub(number, line))
        for line in lines
    )


class UnknownArgument(ValueError):
    """A script names an argument its binding's records do not have."""


def splice_includes(text: str, includes: dict[str, str]) -> str:
    """``text`` with each ``--- @include <name>`` replaced by the part of the include it uses.

    The last include is spliced first, so an earlier one (``args``) also provides what a
    later one (``finalize``, which calls its helpers) uses. ``includes``: each include's
    text by name (``includes/<name>.lua``); one that is not there is a FileNotFoundError.
    Raises :class:`MissingInclude` when the list is not complete.
    """
    listed = [match["name"] for match in _INCLUDE.finditer(text)]
    for match in reversed(list(_INCLUDE.finditer(text))):
        name = match["name"]
        if name not in includes:
            raise FileNotFoundError(f"includes/{name}.lua, which the script includes, is missing")
        text = text[: match.start()] + splice(includes[name], text) + text[match.end() :]
    _check_complete(text, listed, includes)
    return text


def _check_complete(spliced: str, listed: list[str], includes: dict[str, str]) -> None:
    """Raise MissingInclude for a helper ``spliced`` names that only an unlisted include has."""
    defined_here = {name for match in _LOCAL.finditer(spliced) for name in _names(match)}
    wanted = names_used(spliced) - defined_here
    for name, include in includes.items():
        library = _library(include)
        if library is None or name in listed:
            continue
        missing = wanted & library.defined.keys()
        if missing:
            raise MissingInclude(
                f"the script uses {sorted(missing)} of includes/{name}.lua: list it "
                f"(--- @include {name}) before the includes that use it"
            )


_LOCAL = re.compile(
    r"^\s*local\s+(?:function\s+(?P<function>[A-Za-z_]\w*)"
    r"|(?P<names>[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=)",
    re.MULTILINE,
)


def _names(match: re.Match[str]) -> list[str]:
    return [name.strip() for name in (match["function"] or match["names"]).split(",")]


def names_used(code: str) -> set[str]:
    """Every identifier-like word of ``code`` outside whole-line comments."""
    # one findall over the lines kept, not one per line: every worker's start splices
    # every script (a word never spans the newline joining two lines)
    code = "\n".join(line for line in code.splitlines() if not _COMMENT_LINE.match(line))
    return set(_NAME.findall(code))


@dataclass(frozen=True)
class _Library:
    """A library cut at its top-level definitions, each with the names its code uses."""

    texts: list[str]
    uses: list[set[str]]
    defined: dict[str, int]  # name -> the chunk defining it


@functools.lru_cache(maxsize=64)
def _library(lib: str) -> _Library | None:
    """``lib`` cut at each top-level definition, once per text (every script splices it).

    The text before the first definition (comments) is a chunk defining nothing.
    None when the library is not only definitions and comments at its top level.
    """
    lines = lib.splitlines(keepends=True)
    if any(line.rstrip("\n").endswith("\\") for line in lines) or re.search(r"\[=*\[", lib):
        return None
    chunks: list[tuple[set[str], list[str]]] = [(set(), [])]
    for line in lines:
        top = line[:1] not in ("", " ", "\t", "\n")
        if top and not _COMMENT_LINE.match(line):
            match = _DEFINITION.match(line)
            if match:
                names = match["function"] or match["names"]
                chunks.append(({name.strip() for name in names.split(",")}, []))
            elif line.rstrip() not in ("end", "}", ")"):
                return None  # a top-level statement: the library runs as a whole
        chunks[-1][1].append(line)
    texts = ["".join(text) for _, text in chunks]
    defined = {name: i for i, (names, _) in enumerate(chunks) for name in names}
    return _Library(texts, [names_used(text) & defined.keys() for text in texts], defined)


def splice(lib: str, body: str) -> str:
    """``lib``'s definitions that ``body`` uses (transitively), in order; all of it if unsure."""
    library = _library(lib)
    if library is None:
        return lib
    keep = {0}  # the header comments
    pending = [library.defined[name] for name in names_used(body) & library.defined.keys()]
    while pending:
        i = pending.pop()
        if i not in keep:
            keep.add(i)
            pending.extend(library.defined[name] for name in library.uses[i])
    return "".join(text for i, text in enumerate(library.texts) if i in keep)
