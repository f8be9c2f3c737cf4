"""``python -m tests.support.claim_probe worker ...``: the console script, watched at its
first claim.

Runs :func:`app.cli.launch.main` as ``leasehold worker`` does and, at the first call of
``LeaseStore.finish_and_claim`` (the round trip every claim goes out in), writes the
names of the modules imported so far to stderr as one JSON line (``first claim: [...]``);
the claim itself then goes out as it always does, and the worker runs on. What a worker
imports before its first claim is start-up time (issue 19 aim 2).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from app.startup import quiet_collector

PREFIX = "first claim: "


def watch_first_claim() -> None:
    """Wrap ``LeaseStore.finish_and_claim`` to report ``sys.modules`` at its first call."""
    from app.store.leases.store import LeaseStore

    real = LeaseStore.finish_and_claim
    reported = False

    async def finish_and_claim(self: LeaseStore, *args: Any, **kwargs: Any) -> Any:
        nonlocal reported
        if not reported:
            reported = True
            sys.stderr.write(PREFIX + json.dumps(sorted(sys.modules)) + "\n")
            sys.stderr.flush()
        return await real(self, *args, **kwargs)

    LeaseStore.finish_and_claim = finish_and_claim  # type: ignore[method-assign]


if __name__ == "__main__":
    quiet_collector()  # as the console script, before anything is imported
    from app.imports import import_redis

    import_redis()  # as the worker's entry does, before anything imports redis
    watch_first_claim()
    from app.cli.launch import main

    main()
