"""The one code-to-error map: each code a run's ``error`` may carry, to its class."""

from __future__ import annotations

from app.errors.failures import RunFailure
from app.errors.store import EffectOutcomeUnknown, VersionDrift

# the classes of this package (a subclass in a user's module names no code of the map)
_PACKAGE = __name__.rpartition(".")[0] + "."


ParkingError = type[EffectOutcomeUnknown] | type[VersionDrift]


def _run_errors() -> dict[str, type[RunFailure] | ParkingError]:
    """Every class of :mod:`app.errors` that names a code of its own, by that code."""
    found: dict[str, type[RunFailure] | ParkingError] = {
        EffectOutcomeUnknown.code: EffectOutcomeUnknown,
        VersionDrift.code: VersionDrift,
    }
    pending: list[type[RunFailure]] = [RunFailure]
    while pending:
        error = pending.pop()
        pending.extend(error.__subclasses__())
        if error.__module__.startswith(_PACKAGE) and "code" in vars(error):
            found[error.code] = error
    return dict(sorted(found.items()))


# the one code-to-error map: each code a run's ``error`` may carry from app.errors (what
# handlers raise, what the worker records, what the Redis scripts write) -> its class,
# with the code's ``retryable``; a new class there joins it by naming its own ``code``
RUN_ERRORS = _run_errors()
