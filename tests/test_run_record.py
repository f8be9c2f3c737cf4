"""``runs get``'s reader without pydantic (app.run_record): pydantic's answers, or none.

The field table is held to ``Run.model_fields``; generated answers (every field kind,
times in several offsets, floats over the whole range, text with controls and
non-ASCII) are printed both ways and compared byte for byte; answers that are not
canonical are either refused (pydantic then reads them) or printed as pydantic would.
"""

from __future__ import annotations

import json
import math
import random
import struct
from datetime import UTC, datetime, timedelta, timezone
from types import UnionType
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import TypeAdapter

from app import run_record
from app.cli_api import print_run
from app.models import Run, RunStatus

READERS = {
    str: run_record._text,
    int: run_record._integer,
    float: run_record._number,
    datetime: run_record._time,
    Any: run_record._anything,
    dict[str, Any]: run_record._object,
    RunStatus: run_record._status,
}


def test_the_table_is_the_models_fields_in_order() -> None:
    fields = Run.model_fields
    assert [name for name, *_ in run_record.FIELDS] == list(fields)
    for name, reader, nullable, default in run_record.FIELDS:
        field = fields[name]
        optional = get_origin(field.annotation) in (Union, UnionType)
        kinds = [kind for kind in get_args(field.annotation) if kind is not type(None)]
        kind = kinds[0] if optional else field.annotation
        assert nullable == (optional or kind is Any), name
        if name == "error":
            assert reader is run_record._error
        elif name == "on_lease_expired":
            assert reader is run_record._on_lease_expired
            assert get_args(kind) == run_record._ON_LEASE_EXPIRED
        else:
            assert READERS[kind] is reader, name
        if field.is_required():
            assert default is run_record.REQUIRED, name
        elif field.default_factory is not None:
            assert default is dict and field.default_factory() == {}, name
        else:
            assert default == field.default, name
    error_fields = Run.model_fields["error"].annotation
    assert list(get_args(error_fields)[0].model_fields) == list(run_record.ERROR_FIELDS)


def _text(rng: random.Random) -> str:
    alphabet = "ab Z09.-_/\\\"'\n\t\x00\x01\x1f\x7f\u00e9\u2028\u65e5\U0001f600"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def _float(rng: random.Random) -> float:
    if rng.random() < 0.5:
        return rng.uniform(-1, 1) * 10.0 ** rng.randint(-12, 25)
    while True:
        value = struct.unpack("d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            return value


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 7, 2**53, -(2**63), 2**64 + 3, rng.randint(-(10**6), 10**6)])
    if kind == 3:
        return _float(rng)
    if kind in (4, 5):
        return _text(rng)
    if kind == 6:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {_text(rng): _json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _time(rng: random.Random) -> datetime | None:
    if rng.random() < 0.3:
        return None
    zone = rng.choice(
        [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=7))]
    )
    micro = rng.choice([0, 123000, rng.randint(0, 999_999)])
    return datetime(2026, 12, 2, rng.randint(0, 23), rng.randint(0, 59), 7, micro, tzinfo=zone)


def _maybe(rng: random.Random, value: Any) -> Any:
    return value if rng.random() < 0.6 else None


def generated_run(rng: random.Random) -> dict[str, Any]:
    """A run as the API writes it: the model dumped in JSON mode, through ``json``."""
    run = Run(
        id=f"q.{rng.getrandbits(40):x}",
        queue=_text(rng),
        handler=_text(rng),
        status=rng.choice(list(RunStatus)),
        input=_json_value(rng),
        output=_json_value(rng),
        error=_maybe(
            rng,
            {
                "code": _text(rng),
                "message": _text(rng),
                "retryable": rng.random() < 0.5,
                "details": {"owner_id": _text(rng), "n": _json_value(rng)},
            },
        ),
        attempt=rng.randint(1, 5),
        max_attempts=rng.randint(1, 9),
        on_lease_expired=rng.choice(["orphan", "retry"]),
        owner_id=_maybe(rng, _text(rng)),
        fence=rng.randint(0, 2**40),
        lease_expires_at=_time(rng),
        lease_ttl_ms=_maybe(rng, rng.randint(1, 10**6)),
        created_at=_time(rng) or datetime.now(UTC),
        started_at=_time(rng),
        first_started_at=_time(rng),
        finished_at=_time(rng),
        cancel_requested_at=_time(rng),
        idempotency_key=_maybe(rng, _text(rng)),
        metadata={_text(rng): _text(rng) for _ in range(rng.randint(0, 3))},
        last_event_id=_maybe(rng, f"{rng.getrandbits(40)}-0"),
        retention_s=_maybe(rng, rng.choice([3600, 0.5, _float(rng), 1e-5, 2.5e-7])),
        escalation=_maybe(rng, {"reason": _text(rng), "evidence": _json_value(rng)}),
        waiting_for=_maybe(
            rng, {"kind": rng.choice(["sleep", "signal"]), "subject": _text(rng), "until_ms": 1}
        ),
        schedule_id=_maybe(rng, _text(rng)),
        fire_at=_time(rng),
        run_at=_time(rng),
        retry_of=_maybe(rng, _text(rng)),
        retried_by=_maybe(rng, _text(rng)),
        concurrency_key=_maybe(rng, _text(rng)),
        singleton_key=_maybe(rng, _text(rng)),
        priority=rng.randint(-5, 5),
        blocked_on=_maybe(rng, _text(rng)),
        parent_id=_maybe(rng, _text(rng)),
        root_id=_maybe(rng, _text(rng)),
        depth=rng.randint(0, 3),
    )
    # FastAPI: the model in JSON mode, then json.dumps; the client: json.loads
    return json.loads(json.dumps(run.model_dump(mode="json"), ensure_ascii=False))


def printed(run: Any, as_json: bool, capsys: pytest.CaptureFixture[str]) -> str:
    print_run(run, as_json)
    return capsys.readouterr().out


def assert_printed_alike(body: Any, capsys: pytest.CaptureFixture[str]) -> bool:
    """Both readers print ``body`` the same; ``False`` if the light one left it to pydantic."""
    record = run_record.decode(body)
    if record is None:
        return False
    model = Run.model_validate(body)  # what the light reader accepts, pydantic accepts
    for as_json in (False, True):
        assert printed(record, as_json, capsys) == printed(model, as_json, capsys), body
    return True


@pytest.mark.parametrize("seed", range(8))
def test_generated_runs_print_as_pydantics_and_are_never_left_to_it(
    seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(seed)
    for _ in range(250):
        assert assert_printed_alike(generated_run(rng), capsys)


MUTATIONS: list[tuple[str, Any]] = [
    ("attempt", "2"),
    ("attempt", 2.0),
    ("attempt", True),
    ("fence", None),
    ("id", 5),
    ("status", "nope"),
    ("status", None),
    ("on_lease_expired", "never"),
    ("created_at", "2026-12-02 05:00:00Z"),
    ("created_at", "2026-12-02T05:00:00.1234567Z"),
    ("created_at", "2026-12-02T05:00:00"),
    ("created_at", "2026-12-02T25:00:00Z"),
    ("created_at", 1764651600),
    ("lease_expires_at", "2026-12-02T05:00:00-00:00"),
    ("lease_expires_at", "2026-12-02T05:00:00+23:59"),
    ("retention_s", 2**60),
    ("retention_s", "1.5"),
    ("retention_s", 7),
    ("metadata", None),
    ("metadata", []),
    ("error", {"code": "x", "message": "y", "retryable": 1}),
    ("error", {"code": "x", "message": "y", "extra": 1}),
    ("error", {"code": "x"}),
    ("error", "boom"),
    ("output", "\ud800"),
    ("output", float("nan")),
    ("output", {"k": 1e-5, "j": [1e300, 2**70, -0.0]}),
    ("unknown_key", {"kept": False}),
]


@pytest.mark.parametrize(("name", "value"), MUTATIONS, ids=[f"{n}={v!r}" for n, v in MUTATIONS])
def test_an_answer_off_the_canonical_form_is_pydantics_or_printed_as_pydantic(
    name: str, value: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    body = generated_run(random.Random(99))
    body[name] = value
    try:
        Run.model_validate(body)
    except ValueError:  # pydantic refuses it: so must the light reader, leaving it to pydantic
        assert run_record.decode(body) is None
        return
    assert_printed_alike(body, capsys)


@pytest.mark.parametrize("name", ["id", "created_at", "status"])
def test_a_missing_required_field_is_left_to_pydantic(name: str) -> None:
    body = generated_run(random.Random(3))
    del body[name]
    assert run_record.decode(body) is None


def test_absent_optional_fields_take_the_models_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = {
        "id": "q.X",
        "queue": "q",
        "handler": "h",
        "status": "queued",
        "created_at": "2026-12-02T05:00:00Z",
    }
    assert assert_printed_alike(body, capsys)


def test_floats_are_written_as_pydantic_writes_them() -> None:
    rng = random.Random(7)
    adapter = TypeAdapter(Any)
    floats = [_float(rng) for _ in range(50_000)]
    floats += [1e-5, 1.5e-5, -1e-5, 1e-6, 9.99e-10, 1e16, 1e-4, 1e22, 5e-324, -0.0, 0.0]
    for value in floats:
        assert run_record._float(value) == adapter.dump_json(value).decode(), repr(value)
