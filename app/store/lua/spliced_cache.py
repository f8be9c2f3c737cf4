"""The spliced scripts, kept on disk between starts and keyed by what they were made of.

Splicing every transition (:mod:`app.store.lua.splicing`) costs ~10 ms of every process
start: the worker's before its first claim (issue 19 aim 2), the API's, a CLI
command's that loads scripts. Its result depends only on the Lua files' bytes and on
the splicing code, so it is written once to ``<lua dir>/__pycache__/spliced.json`` and
used again only when its key matches: a SHA-256 over every script's and include's name
and bytes, the splicing module's own source and the bindings' argument records (a
field added to a record renumbers the arguments after it). Like a ``.pyc``, but by content, not
by modification time: an edited, checked-out or copied file, or a changed splicing
rule, never gets an old splice. Reading the files and the cache costs ~3 ms.

Writing is best effort: where the directory is read-only (an image whose package
belongs to root) every start splices, as before. It is atomic (a temporary file,
then a rename), so processes starting together never read half a cache; a cache that
is unreadable, truncated or of another shape counts as absent and is written again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

from app.store.lua import splicing as lua_include

log = logging.getLogger(__name__)

CACHE_DIR = "__pycache__"
CACHE_FILE = "spliced.json"


def key(
    scripts: Mapping[str, str],
    includes: Mapping[str, str],
    arguments: Mapping[str, lua_include.ArgumentRecords] | None = None,
) -> str:
    """What a splice is made of: the files' names and texts, the splicing code, and the
    bindings' argument records the scripts' ``@names`` are made numbers from."""
    digest = hashlib.sha256(Path(lua_include.__file__).read_bytes())
    records = {name: repr(record) for name, record in (arguments or {}).items()}
    for kind, files in (("script", scripts), ("include", includes), ("arguments", records)):
        for name in sorted(files):
            for part in (kind, name, files[name]):
                data = part.encode()
                digest.update(len(data).to_bytes(8, "big"))
                digest.update(data)
    return digest.hexdigest()


def read(directory: Path, expected_key: str, names: Collection[str]) -> dict[str, str] | None:
    """The spliced bodies of ``names``, if the cache was made of exactly these files."""
    try:
        cached = json.loads((directory / CACHE_DIR / CACHE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("key") != expected_key:
        return None
    bodies = cached.get("bodies")
    if not isinstance(bodies, dict) or bodies.keys() != set(names):
        return None
    if not all(isinstance(body, str) for body in bodies.values()):
        return None
    return bodies


def write(directory: Path, made_of: str, bodies: Mapping[str, str]) -> None:
    """Keep ``bodies`` for the next start; a directory that cannot take it keeps none."""
    target = directory / CACHE_DIR
    temporary: str | None = None
    try:
        target.mkdir(exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target, prefix=".spliced-", suffix=".json")
        with os.fdopen(handle, "w") as stream:
            json.dump({"key": made_of, "bodies": dict(bodies)}, stream)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would keep it from other users' starts
        os.replace(temporary, target / CACHE_FILE)
        temporary = None
    except OSError as exc:
        log.debug("spliced scripts not cached in %s: %s", target, exc)
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
