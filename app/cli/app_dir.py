"""Your code is found: the app dir goes first on ``sys.path`` before LEASEHOLD_HANDLERS loads.

``python -m`` puts the working directory on ``sys.path``; a console script such as
``leasehold`` does not, so ``LEASEHOLD_HANDLERS=mypkg.handlers leasehold worker`` run
from beside ``mypkg/`` found nothing. As uvicorn's ``--app-dir`` does, the directory
``LEASEHOLD_APP_DIR`` names (``--app-dir``; the working directory by default) is put
first on ``sys.path`` before the handler modules are imported, and an import that
still fails says where it looked and the three ways to fix it, in one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.errors import ConfigurationError

# Leasehold's own top-level package: a user's package of the same name is shadowed by it
OWN_PACKAGE = "app"


def put_first_on_path(app_dir: Path) -> Path:
    """Put ``app_dir`` (resolved) first on ``sys.path``; returns it.

    Raises :class:`ConfigurationError` when it is not a directory. A directory already on
    ``sys.path`` keeps its place (``python -m`` put the working directory first already).
    """
    resolved = Path(app_dir).expanduser().resolve()
    try:
        found = resolved.is_dir()
    except OSError as exc:  # a name too long, a directory we may not search
        raise ConfigurationError(
            f"invalid setting LEASEHOLD_APP_DIR: {exc.strerror} (--app-dir or LEASEHOLD_APP_DIR)"
        ) from None
    if not found:
        raise ConfigurationError(
            f"invalid setting LEASEHOLD_APP_DIR: {resolved} is not a directory (it is where "
            "your handler modules are imported from; --app-dir or LEASEHOLD_APP_DIR)"
        )
    on_path = {_resolved(entry) for entry in sys.path}
    if resolved not in on_path:
        sys.path.insert(0, str(resolved))
    return resolved


def import_failure(module: str, exc: ImportError, app_dir: Path) -> str:
    """One line: which module failed, where Python looked, and how to make it findable."""
    missing = exc.name or ""
    if missing and not _is_part_of(missing, module):
        # the handler module was found; something it imports is not installed
        return (
            f"invalid setting LEASEHOLD_HANDLERS: {module} was found but imports "
            f"{missing!r}, which is not installed ({exc}): install it where leasehold runs "
            f"({sys.executable} -m pip install ...)"
        )
    top = module.partition(".")[0]
    if top == OWN_PACKAGE:
        return (
            f"invalid setting LEASEHOLD_HANDLERS: cannot import {module} ({exc}): {OWN_PACKAGE!r} "
            f"is Leasehold's own package, so yours is never looked for: rename your package"
        )
    searched = ", ".join(entry or "." for entry in sys.path)
    return (
        f"invalid setting LEASEHOLD_HANDLERS: cannot import {module} ({exc}); looked in the "
        f"app dir {app_dir} (LEASEHOLD_APP_DIR, on sys.path) and all of sys.path "
        f"[{searched}]. Fix: run "
        f"from the directory that holds {top}/ or {top}.py, or set LEASEHOLD_APP_DIR "
        f"(--app-dir) to it, or install your package (pip install -e .), or add its "
        "parent directory to PYTHONPATH"
    )


def _is_part_of(missing: str, module: str) -> bool:
    """``missing`` is ``module`` or one of its parent packages (``mypkg`` of ``mypkg.x``)."""
    return module == missing or module.startswith(f"{missing}.")


def _resolved(entry: str) -> Path | None:
    try:
        return Path(entry or ".").resolve()
    except (OSError, RuntimeError):
        return None
