"""A worker's build: which code it runs, as one short id every run it claims records.

``LEASEHOLD_BUILD_ID`` names it (a CI's git sha, a release tag); unset, it is a stable
hash of the modules that define the worker's handlers — their names and their source
bytes, in order — so two workers started from the same code agree without being told,
and a change to a handler's module gives a new id. What those modules import is not in
the hash: set the id from your build when a helper module's change must count.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path

# a build id: a token safe in a key name, a header and a URL; what LEASEHOLD_BUILD_ID takes
BUILD_ID_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
HASHED_PREFIX = "h-"


def handler_modules_build(modules: Iterable[str]) -> str:
    """``h-`` and 16 hex digits of the SHA-256 of each named module's name and source
    (a module without a source file counts by its name alone)."""
    digest = hashlib.sha256()
    for name in sorted(set(modules)):
        digest.update(name.encode() + b"\0")
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path and Path(path).suffix == ".py":
            digest.update(Path(path).read_bytes())
        digest.update(b"\0")
    return HASHED_PREFIX + digest.hexdigest()[:16]
