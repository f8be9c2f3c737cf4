"""A run's fingerprint never changes across versions: stored idempotency keys must still replay.

(And the pure logic of how create_many cuts its script calls.)

An idempotency key in Redis holds the fingerprint of the request that created
its run; if this code computed another one for the same request, a client
retrying after an upgrade would get 409 instead of its run. The hashes below
were computed by the code that wrote the keys already stored.
"""

from __future__ import annotations

import dataclasses

import pytest

from app.settings import Settings
from app.store.context import StoreContext
from app.store.retention import Retention
from app.store.runs.bindings import CreateRun, CreateShape
from app.store.runs.creating import CREATE_CHUNK_BYTES, CREATE_CHUNK_RUNS, _chunks, _segments
from app.store.runs.new import _ENCODED_IN_KEY, _FRAME_FIELDS, _NOT_CACHED, _OWN, NewRun
from app.store.runs.store import RunStore

STORED = [
    (
        NewRun("demo.echo", {"m": "hé", "x": [1, 2.5, None]}),
        "5fbb109908c80a771c5d389c8210cc4169b55ddeed98552a02f339304132fe88",
    ),
    (
        NewRun(
            "a.b",
            None,
            queue="q",
            max_attempts=3,
            metadata={"t": "ü"},
            budget={"max_duration_s": 5},
            retention_ms=1000,
        ),
        "9b6ecb0db477cffdb02553dd53182ea42f4d28984bdaf27042ca9138efaa00c4",
    ),
]


@pytest.mark.parametrize(("new", "stored"), STORED)
def test_the_fingerprint_is_the_one_already_stored(new: NewRun, stored: str) -> None:
    assert new.fingerprint() == stored


def test_an_input_encoded_up_front_gives_the_same_fingerprint() -> None:
    new = STORED[0][0]
    encoded = NewRun(new.handler, new.input, encoded_input=new.input_json)
    assert encoded.fingerprint() == new.fingerprint()
    assert encoded == new  # the encoding is a cache, not part of the run


def test_a_chunk_closes_at_its_run_count_or_its_bytes() -> None:
    """create_many's calls: at most CREATE_CHUNK_RUNS runs, about CREATE_CHUNK_BYTES of input."""
    shape = CreateShape(*([""] * len(CreateShape._fields)))
    small = (shape, CreateRun("", "", "", ""))
    big = (shape, CreateRun("", "x" * (CREATE_CHUNK_BYTES // 2), "", ""))
    huge = (shape, CreateRun("", "x" * 2 * CREATE_CHUNK_BYTES, "", ""))
    sizes = [c.stop - c.start for c in _chunks([small] * (2 * CREATE_CHUNK_RUNS + 1))]
    assert sizes == [CREATE_CHUNK_RUNS, CREATE_CHUNK_RUNS, 1]
    assert [c.stop - c.start for c in _chunks([big, big, big, small])] == [2, 2]
    assert [c.stop - c.start for c in _chunks([huge])] == [1]
    metadata = shape._replace(metadata="x" * (CREATE_CHUNK_BYTES // 2))
    assert [c.stop - c.start for c in _chunks([(metadata, small[1])] * 3)] == [2, 1]


def test_a_chunk_sends_each_stretch_of_one_shape_once_in_order() -> None:
    """Consecutive runs of one shape share a segment; a shape seen again starts another."""
    a = CreateShape(*(["a"] * len(CreateShape._fields)))
    b = a._replace(handler="b")
    runs = [CreateRun(str(i), "", "", "") for i in range(5)]
    segments = _segments(
        [(a, runs[0]), (a, runs[1]), (b, runs[2]), (a._replace(), runs[3]), (a, runs[4])]
    )
    assert [(shape.handler, [r.run_id for r in rs]) for shape, rs in segments] == [
        ("a", ["0", "1"]),
        ("b", ["2"]),
        ("a", ["3", "4"]),
    ]


def _store() -> RunStore:
    """A store that is never sent anything: create_group is pure."""
    retention = Retention.for_settings(Settings())
    return RunStore(StoreContext(None, None, "lh", 1000, retention, 30_000, 3_600_000))  # type: ignore[arg-type]


# runs that differ from the first in one thing each: a frame shared by mistake would show
VARIANTS = [
    NewRun("demo.echo", {"m": 1}),
    NewRun("demo.echo", {"m": 2}, idempotency_key="k"),
    NewRun("demo.other", {"m": 1}),
    NewRun("demo.echo", {"m": 1}, queue="q"),
    NewRun("demo.echo", {"m": 1}, max_attempts=3),
    NewRun("demo.echo", {"m": 1}, on_lease_expired="retry"),
    NewRun("demo.echo", {"m": 1}, metadata={"t": "ü"}),
    NewRun("demo.echo", {"m": 1}, metadata={"t": "v"}),
    NewRun("demo.echo", {"m": 1}, budget={}),
    NewRun("demo.echo", {"m": 1}, budget={"max_duration_s": 5}),
    NewRun("demo.echo", {"m": 1}, retention_ms=1000),
    NewRun("demo.echo", {"m": 1}, queued_ttl_ms=3_600_000),
    NewRun("demo.echo", {"m": 1}, queued_ttl_ms=5),
    NewRun("demo.echo", {"m": 1}, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"),
    NewRun("demo.echo", {"m": 1}, start_at_ms=10**13),
    NewRun("demo.echo", {"m": 1}, delay_ms=500),
    NewRun("demo.echo", {"m": 1}, concurrency_key="c"),
    NewRun("demo.echo", {"m": 1}, singleton_key="s"),
    NewRun("demo.echo", {"m": 1}, singleton_key="s", on_conflict="reject"),
    NewRun("demo.echo", {"m": 1}, priority=2),
    NewRun("demo.echo", {"m": 1}, priority=2, boost_ms=4000),
    NewRun("demo.echo", {"m": 1}, parent_id="default.P", root_id="default.R", depth=1),
    NewRun("demo.echo", {"m": 1}, parent_id="default.P", root_id="default.S", depth=2),
    NewRun("demo.echo", None, run_id="default.01J0000000000000000000000"),
    NewRun("demo.echo", {"m": 1}, encoded_input='{"m":1}'),
]


def test_runs_of_one_call_get_the_shape_and_fingerprint_they_would_get_alone() -> None:
    """create_group's per-call frames change nothing: each run as if it were the only one."""
    store, frames = _store(), {}
    for new in VARIANTS * 2:  # the second time every frame is already there
        shape, run = store.create_group(new, frames)
        alone_shape, alone = store.create_group(new)
        assert shape == alone_shape
        assert run._replace(run_id="") == alone._replace(run_id="")
        # only an idempotency key's record keeps a fingerprint: without one nothing is hashed
        assert run.fingerprint == (new.fingerprint() if new.idempotency_key else "")
    assert len(frames) == len(VARIANTS) - 3  # the key, the input and the id are a run's own


def test_every_field_of_a_run_is_in_its_frame_unless_named_its_own() -> None:
    """A NewRun field added later is part of the frame key (the safe side: runs that
    differ in it never share a shape) unless it is named a run's own; the names of the
    exceptions are NewRun's (a rename cannot leave a stale one behind)."""
    names = {f.name for f in dataclasses.fields(NewRun)}
    excepted = {*_OWN, *_ENCODED_IN_KEY, *_NOT_CACHED}
    assert excepted <= names
    assert set(_FRAME_FIELDS) == names - excepted
    assert {"input", "idempotency_key", "run_id"} <= set(_OWN)


def test_a_run_named_before_its_create_keeps_its_id_over_the_batchs() -> None:
    store, frames = _store(), {}
    named = NewRun("demo.echo", {}, run_id="default.01J0000000000000000000000")
    assert store.create_group(named, frames, "default.OTHER")[1].run_id == named.run_id
    assert store.create_group(NewRun("demo.echo", {}), frames, "default.OTHER")[1].run_id == (
        "default.OTHER"
    )
