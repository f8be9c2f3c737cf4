"""Lua snippets spliced with the includes they name, to run one helper against Redis."""

from __future__ import annotations

from app.store.lua.scripts import INCLUDES_DIR, lua_dir
from app.store.lua.splicing import splice_includes


def includes() -> dict[str, str]:
    """Every include's text by name (``scripts/lua/includes/<name>.lua``)."""
    return {path.stem: path.read_text() for path in (lua_dir() / INCLUDES_DIR).glob("*.lua")}


def include(name: str) -> str:
    """One include's text."""
    return (lua_dir() / INCLUDES_DIR / f"{name}.lua").read_text()


def snippet(body: str, *listed: str) -> str:
    """``body`` with the helpers it uses of ``listed`` includes, as a script would have them.

    Raises MissingInclude when ``body`` names a helper of an include not listed.
    """
    head = "".join(f"--- @include {name}\n" for name in listed)
    return splice_includes(head + body, includes())
