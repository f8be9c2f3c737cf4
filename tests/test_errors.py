"""The one code-to-error map: every code a run's ``error`` carries has its class.

The Redis scripts write some codes themselves (an orphaned, expired or superseded
run, a person's resolve, an unknown effect's outcome); the test reads them from
the Lua sources, so a script cannot write a new code without its class.
"""

from __future__ import annotations

import inspect
import re

import app.errors
from app.errors import RUN_ERRORS, EffectOutcomeUnknown, LeaseExpired, RunFailure
from tests.support.processes import REPO_ROOT

LUA_DIR = REPO_ROOT / "scripts" / "lua"
# a field `code = '...'` in a Lua table constructor (an error a script builds), and the
# `retryable` of the same table; `local code = 'OK'` (a script's reply code) is not one
ERROR_CODE = re.compile(r"[{,]\s*code\s*=\s*'([^']*)'")
RETRYABLE = re.compile(r"\bretryable\s*=\s*(true|false)\b")


def script_error_codes() -> dict[str, dict[str, bool | None]]:
    """Each script's error codes -> their ``retryable`` (None: the table does not say)."""
    written: dict[str, dict[str, bool | None]] = {}
    for path in sorted(LUA_DIR.rglob("*.lua")):
        source = "\n".join(line.split("--", 1)[0] for line in path.read_text().splitlines())
        for match in ERROR_CODE.finditer(source):
            rest = source[match.end() :]
            following = ERROR_CODE.search(rest)
            flag = RETRYABLE.search(rest, 0, following.start() if following else len(rest))
            codes = written.setdefault(str(path.relative_to(LUA_DIR)), {})
            codes[match.group(1)] = None if flag is None else flag.group(1) == "true"
    return written


def test_every_error_code_a_script_writes_has_its_class_with_the_same_retryable() -> None:
    written = script_error_codes()
    found = {code for codes in written.values() for code in codes}
    # the scan finds what the scripts write today (a scan that finds nothing checks nothing)
    assert {
        "lease_expired",
        "queued_ttl_expired",
        "superseded",
        "resolved_as_failed",
        "effect_outcome_unknown",
    } <= found
    for script, codes in written.items():
        for code, retryable in codes.items():
            assert code in RUN_ERRORS, f"{script} writes error code {code!r}: add its class"
            assert retryable == RUN_ERRORS[code].retryable, (
                f"{script} writes {code!r} with retryable {retryable}, its class says "
                f"{RUN_ERRORS[code].retryable}"
            )


def test_each_code_has_one_class_and_every_run_failure_of_the_tree_is_mapped() -> None:
    own_codes = [
        error
        for _, error in inspect.getmembers(app.errors, inspect.isclass)
        if error.__module__.startswith("app.errors.") and "code" in vars(error)
    ]
    assert len({error.code for error in own_codes}) == len(own_codes)  # no two share one
    assert set(RUN_ERRORS.values()) == set(own_codes)
    assert all(RUN_ERRORS[error.code] is error for error in own_codes)
    assert RUN_ERRORS["lease_expired"] is LeaseExpired
    assert RUN_ERRORS["effect_outcome_unknown"] is EffectOutcomeUnknown
    assert RUN_ERRORS["run_failed"] is RunFailure


def test_an_unknown_handler_names_what_was_probably_meant_or_a_few_known_ones() -> None:
    from app.errors import UnknownHandler

    assert str(UnknownHandler("demo.ech", ["demo.echo", "demo.sleep"])) == (
        "unknown handler 'demo.ech'; did you mean 'demo.echo'?"
    )
    many = [f"h{i:02d}" for i in range(25)]
    message = str(UnknownHandler("zzz", many))
    assert message == (
        "unknown handler 'zzz'; known: h00, h01, h02, h03, h04, h05, h06, h07, h08, h09 "
        "and 15 more (GET /handlers)"
    )
    assert str(UnknownHandler("x")) == "unknown handler 'x'"
