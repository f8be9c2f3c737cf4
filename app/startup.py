"""Start-up without the cyclic collector's repeated passes (the ``leasehold`` script).

Importing what a worker needs creates ~90,000 container objects (modules, classes,
functions, pydantic schemas), none of them garbage: they live as long as the process.
With CPython's default thresholds the collector still runs ~130 times while they are
created, each pass over a heap that only grows: ~15 % of a worker's start-up CPU
(``python -X importtime`` does not show it; BENCHMARKS.md, issue 19). So the script
(:mod:`app.cli.launch`) raises the youngest generation's threshold before it imports
anything, and a long-running command calls :func:`settle` once it is ready to serve:
everything allocated so far is frozen (``gc.freeze``: never scanned again) and the
thresholds are put back. A one-shot command (``runs get``) simply ends first; one that
runs on without settling (``runs follow``) still has its cycles collected, less often.

``python -m app.cli.launch`` is the script without installing it (``leasehold up``'s
children, the process tests, the soak: :data:`app.stack.processes.CLI_MODULE`).
``python -m app.cli`` starts without this: the collector then runs as it always
does, and :func:`settle` only freezes.
"""

from __future__ import annotations

import gc

# allocations between two passes over the youngest generation while modules load
# (CPython's default is 700): start-up then sees one pass or none
START_UP_THRESHOLD = 100_000

_saved: tuple[int, int, int] | None = None


def quiet_collector() -> None:
    """Collect rarely until :func:`settle`; start-up allocates only what it keeps."""
    global _saved
    if _saved is None:
        _saved = gc.get_threshold()
        gc.set_threshold(START_UP_THRESHOLD, *_saved[1:])


def settle() -> None:
    """Start-up is over: freeze what it built and give the collector its thresholds back.

    Frozen objects are left out of every later pass, so each one scans only what
    serving allocates (short-lived runs, requests), not the modules.
    """
    global _saved
    gc.freeze()
    if _saved is not None:
        gc.set_threshold(*_saved)
        _saved = None
