"""Judging a batch's items: one schema pass over the list, options resolved once per shape.

Every item of ``POST /runs/batch`` must be judged exactly as ``POST /runs`` judges a
body (:func:`app.api.routes.runs.new_run_of`), and refused alone. Judged one by one,
that was ~35 % of the API's CPU per created run: pydantic called 1,000 times per
request for the request model and again for the handler's input model, and the same
few options (handler defaults, bounds, the aging boost) resolved for every item.

:class:`BatchJudge` does the same work in bulk and falls back to the one-by-one path
whenever bulk cannot prove it gives the same answer:

* the items are validated as ``list[CreateRunRequest]`` in one call; if any item
  fails, every item is judged one by one (``CreateRunRequest`` per item), so each
  invalid item's 422 lists exactly its own errors, located under its index;
* each handler's inputs are validated as a list of its input model in one call;
  a handler whose list fails has each of its items' inputs judged alone;
* the options an item resolves to (:func:`app.api.routes.runs.run_options`) are
  kept per distinct set of option values, so a batch of runs that ask for the same
  options resolves them once. An item with a ``budget`` or ``run_at`` resolves its own.

The content rule (depth, non-finite numbers) is still each item's own, first, as before.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from operator import attrgetter
from typing import Any, cast

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, TypeAdapter, ValidationError

from app.api.bodies import content_errors, validate_json
from app.api.routes.runs import check_metadata_size, encoded_input_of, new_run_of, run_options
from app.api.state import ApiState
from app.errors import UnknownHandler
from app.models import HANDLER_NAME_PATTERN, IDEMPOTENCY_KEY_PATTERN, QUEUE_NAME_PATTERN
from app.models.api import CreateRunRequest
from app.store.runs.new import NewRun

# fields an item gives for itself, never read by run_options (rate_limits: resolved after
# judging, by with_start_gates); every other field of the request is an option
_PER_ITEM = frozenset(("input", "idempotency_key", "metadata", "cancel_on_disconnect"))
_NOT_OPTIONS = _PER_ITEM | {"rate_limits"}
_option_values = attrgetter(*(n for n in CreateRunRequest.model_fields if n not in _NOT_OPTIONS))


@functools.cache
def _items_adapter() -> TypeAdapter[list[CreateRunRequest]]:
    return TypeAdapter(list[CreateRunRequest])


@functools.lru_cache(maxsize=64)
def _inputs_adapter(model: type[BaseModel]) -> TypeAdapter[list[Any]]:
    return TypeAdapter(list[model])  # type: ignore[valid-type]


class BatchJudge:
    """Judges the items of one batch request; :meth:`judged` raises what the single create would."""

    def __init__(self, items: list[object], state: ApiState) -> None:
        self._state = state
        self._max_depth = state.settings.max_input_depth
        self._bodies = _validated(items)
        self._inputs_valid: set[str] = set()
        if self._bodies is not None:
            self._inputs_valid = _inputs_valid(_handlers_and_inputs(items, self._bodies), state)
        self._options: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def judged(self, item: object, i: int) -> NewRun:
        """Item ``i`` as ``POST /runs`` would judge it as a body; raises what that would answer."""
        loc: tuple[str | int, ...] = ("body", "items", i)
        errors = content_errors(item, max_depth=self._max_depth, loc=loc)
        if errors:
            raise RequestValidationError(errors)
        if self._bodies is None:  # some item is invalid: each is judged alone
            return new_run_of(validate_json(CreateRunRequest, item, loc=loc), self._state, None)
        body = self._bodies[i]
        if body is None:  # a plain item (_plain): the schema takes it as it is
            # a dict (_plain checked it); narrowed by the assert, not typing.cast: a call
            # and a dict[str, Any] alias made per item
            assert type(item) is dict
            plain = item
            return self._new_run(
                plain["handler"],
                plain.get("input", {}),
                plain.get("idempotency_key"),
                dict(plain.get("metadata", ())),
                ("plain", plain["handler"], plain.get("queue", "default")),
            )
        key = None if body.budget is not None or body.run_at is not None else _option_values(body)
        return self._new_run(
            body.handler, body.input, body.idempotency_key, body.metadata, key, body
        )

    def _new_run(
        self,
        handler: str,
        input_value: Any,
        idempotency_key: str | None,
        metadata: dict[str, Any],
        options_key: tuple[Any, ...] | None,
        body: CreateRunRequest | None = None,
    ) -> NewRun:
        """:func:`new_run_of` of an item the schema accepts, in its order of checks.

        ``body``: the item as validated (None for a plain item: its options are
        the defaults of its handler and queue); ``options_key``: what its options
        are resolved once for (None: for it alone).
        """
        state = self._state
        encoded_input = encoded_input_of(input_value, state.settings.max_input_bytes)
        check_metadata_size(metadata, state.settings.max_metadata_bytes)
        spec = state.registry.get(handler)
        if handler not in self._inputs_valid:
            spec.parse_input(input_value)
        row = None if options_key is None else self._options.get(options_key)
        if row is None:
            if body is None:  # the request a plain item is: its handler and queue
                body = CreateRunRequest(handler=handler, queue=cast(str, options_key)[2])
            row = _options_row(run_options(body, spec, state.settings))
            if options_key is not None:
                self._options[options_key] = row
        # by position (the row is in NewRun's field order): ~5,000 fewer instructions a run
        # than keywords (bench/batch_cost.py)
        return _new_run_by_position(
            row[0],
            input_value,
            *row[2:_KEY_AT],
            idempotency_key,
            metadata,
            *row[_KEY_AT + 2 : -1],
            encoded_input,
        )


# NewRun's fields in order; an item's own are filled in by position (_PER_RUN_AT)
_NEW_RUN_FIELDS = tuple(dataclasses.fields(NewRun))
_NEW_RUN_FIELDS_NAMED = {f.name: f for f in _NEW_RUN_FIELDS}
_PER_RUN_AT = {
    name: at
    for at, name in enumerate(f.name for f in _NEW_RUN_FIELDS)
    if name in ("input", "idempotency_key", "metadata", "encoded_input")
}
# BatchJudge._new_run fills them by position: input second, the key and the metadata
# side by side, the encoded input last; the other fields may be anywhere and come and go
_KEY_AT = _PER_RUN_AT["idempotency_key"]
assert (_PER_RUN_AT["input"], _PER_RUN_AT["metadata"], _PER_RUN_AT["encoded_input"]) == (
    1,
    _KEY_AT + 1,
    len(_NEW_RUN_FIELDS) - 1,
), "NewRun's own fields moved: BatchJudge._new_run fills them by position"


# mypy cannot count starred arguments against NewRun's fields; _PER_RUN_AT holds the order
_new_run_by_position: Callable[..., NewRun] = NewRun


def _options_row(options: dict[str, Any]) -> tuple[Any, ...]:
    """Every :class:`NewRun` field in order: an option's value, else the field's default
    (an item's own fields as None: filled in per item)."""
    assert options.keys() <= _NEW_RUN_FIELDS_NAMED.keys() - _PER_RUN_AT.keys(), options.keys()
    row = []
    for f in _NEW_RUN_FIELDS:
        if f.name in options:
            row.append(options[f.name])
        elif f.default is not dataclasses.MISSING:
            row.append(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            row.append(f.default_factory())
        else:
            row.append(None)
    return tuple(row)


# what a plain item may hold: the schema's own checks for them are these (pydantic would
# give back the same values), and every other field takes its default
_PLAIN_FIELDS = frozenset(("handler", "input", "queue", "idempotency_key", "metadata"))
_HANDLER = re.compile(HANDLER_NAME_PATTERN)
_QUEUE = re.compile(QUEUE_NAME_PATTERN)
_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def _plain(item: object, handlers: set[str], queues: set[str]) -> bool:
    """Whether ``CreateRunRequest`` takes ``item`` as it is: only handler, input, queue,
    idempotency key and metadata, each a value the schema accepts unchanged.

    Most items of a batch are this; they skip pydantic (the request model's ~20
    fields and defaults per item). Anything else is left to pydantic. ``handlers``,
    ``queues``: the names already matched in this batch (its items mostly repeat
    the same few: one pattern match per name, not per item).
    """
    if type(item) is not dict or not item.keys() <= _PLAIN_FIELDS:
        return False
    handler, queue = item.get("handler"), item.get("queue", "default")
    key, metadata = item.get("idempotency_key"), item.get("metadata", {})
    return (
        type(handler) is str
        and (handler in handlers or _matched(handler, _HANDLER, handlers))
        and type(queue) is str
        and (queue in queues or _matched(queue, _QUEUE, queues))
        and (key is None or (type(key) is str and _KEY.fullmatch(key) is not None))
        and type(metadata) is dict
    )


def _matched(name: str, pattern: re.Pattern[str], known: set[str]) -> bool:
    """Whether ``pattern`` matches all of ``name``; a name it matches joins ``known``."""
    if pattern.fullmatch(name) is None:
        return False
    known.add(name)
    return True


def _validated(items: list[object]) -> list[CreateRunRequest | None] | None:
    """Each item as a :class:`CreateRunRequest` (None for a plain one), the others in one
    pydantic pass; None when any is invalid."""
    handlers: set[str] = set()
    queues: set[str] = set()
    plain = [_plain(item, handlers, queues) for item in items]
    try:
        others = [item for item, is_plain in zip(items, plain, strict=True) if not is_plain]
        bodies = iter(_items_adapter().validate_python(others))
    except ValidationError:
        return None
    return [None if p else next(bodies) for p in plain]


def _handlers_and_inputs(
    items: list[object], bodies: list[CreateRunRequest | None]
) -> list[tuple[str, Any]]:
    """Each item's handler and input, from its validated body or (plain) its dict."""
    pairs = []
    for item, body in zip(items, bodies, strict=True):
        if body is None:
            assert type(item) is dict  # a plain item (as in BatchJudge.judged)
            pairs.append((item["handler"], item.get("input", {})))
        else:
            pairs.append((body.handler, body.input))
    return pairs


def _inputs_valid(pairs: list[tuple[str, Any]], state: ApiState) -> set[str]:
    """The handlers all of whose items' inputs their input model accepts, one pass each."""
    by_handler: dict[str, list[Any]] = {}
    for handler, value in pairs:
        by_handler.setdefault(handler, []).append({} if value is None else value)
    valid = set()
    for name, inputs in by_handler.items():
        try:
            _inputs_adapter(state.registry.get(name).input_model).validate_python(inputs)
        except (UnknownHandler, ValidationError):
            continue  # each of its items judged alone: its own 422
        valid.add(name)
    return valid
