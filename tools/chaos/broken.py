"""A deliberately broken build, for the harness self-test only: ``python -m tools.chaos.broken``.

It is ``leasehold`` (same CLI, same arguments) except that the Lua scripts come
from ``$CHAOS_LUA_DIR`` instead of ``scripts/lua``. The self-test fills that
directory with a copy of the scripts whose fence checks were removed
(:func:`write_unfenced_scripts`), starts the chaos cluster's workers through
this module, and expects the checker to report the stale writes such a build
lets through. Nothing in ``app/`` knows about it: the product has no switch to
load other scripts.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from app.store.lua import scripts

LUA_DIR_ENV = "CHAOS_LUA_DIR"

# fence.lua's holds() is the fence check of every worker write; renew_leases has its own
FENCED_HOLDS = """  return (cur[1] == 'running' or cur[1] == 'cancelling')
    and cur[2] == owner and cur[3] == fence"""
UNFENCED_HOLDS = "  return cur[1] ~= false"
FENCED_RENEWAL = """  if (cur[1] == 'running' or cur[1] == 'cancelling') and cur[2] == owner
      and cur[3] == ARGV[i + @LeaseGroup.fence] then"""
UNFENCED_RENEWAL = "  if cur[1] then"


def write_unfenced_scripts(target: Path) -> Path:
    """Copy scripts/lua to ``target`` with every fence check removed; returns ``target``.

    Raises ValueError if a check is no longer where this expects it (the scripts
    changed): a self-test that silently broke nothing would prove nothing.
    """
    shutil.copytree(scripts.lua_dir(), target)
    _replace(target / "includes" / "fence.lua", FENCED_HOLDS, UNFENCED_HOLDS)
    _replace(target / "leases" / "renew_leases-2.lua", FENCED_RENEWAL, UNFENCED_RENEWAL)
    return target


def _replace(path: Path, old: str, new: str) -> None:
    source = path.read_text()
    if old not in source:
        raise ValueError(f"{path.name} no longer contains the fence check this build removes")
    path.write_text(source.replace(old, new))


def main() -> None:
    """Run the leasehold CLI with the scripts in $CHAOS_LUA_DIR."""
    lua_dir = Path(os.environ[LUA_DIR_ENV])
    scripts.lua_dir = lambda: lua_dir
    from app.cli.main import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
