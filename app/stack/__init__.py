"""``leasehold up``: every part of a stack on one machine, and the harness that starts them.

:mod:`app.stack.stack` starts a stack (its own Redis, the API, workers, reconcilers);
:mod:`app.stack.processes` starts one ``leasehold`` child with an env and a log and
waits for its health; :mod:`app.stack.embedded` runs a private ``redis-server``. The
demo's walkthrough, the benchmarks and the process tests use the same harness.
"""
