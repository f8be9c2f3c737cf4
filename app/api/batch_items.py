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

import functools
from operator import attrgetter
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, TypeAdapter, ValidationError

from app.api.bodies import content_errors, validate_json
from app.api.routes.runs import encoded_input_of, new_run_of, run_options
from app.api.state import ApiState
from app.errors import UnknownHandler
from app.models import CreateRunRequest
from app.store.runs import NewRun

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
        self._inputs_valid = set() if self._bodies is None else _inputs_valid(self._bodies, state)
        self._options: dict[tuple[Any, ...], dict[str, Any]] = {}

    def judged(self, item: object, i: int) -> NewRun:
        """Item ``i`` as ``POST /runs`` would judge it as a body; raises what that would answer."""
        loc: tuple[str | int, ...] = ("body", "items", i)
        errors = content_errors(item, max_depth=self._max_depth, loc=loc)
        if errors:
            raise RequestValidationError(errors)
        if self._bodies is None:  # some item is invalid: each is judged alone
            return new_run_of(validate_json(CreateRunRequest, item, loc=loc), self._state, None)
        return self._new_run(self._bodies[i])

    def _new_run(self, body: CreateRunRequest) -> NewRun:
        """:func:`new_run_of` of a body already validated, in its order of checks."""
        state = self._state
        encoded_input = encoded_input_of(body, state.settings.max_input_bytes)
        spec = state.registry.get(body.handler)
        if body.handler not in self._inputs_valid:
            spec.parse_input(body.input)
        key = None if body.budget is not None or body.run_at is not None else _option_values(body)
        options = None if key is None else self._options.get(key)
        if options is None:
            options = run_options(body, spec, state.settings)
            if key is not None:
                self._options[key] = options
        return NewRun(
            input=body.input,
            idempotency_key=body.idempotency_key,
            metadata=body.metadata,
            encoded_input=encoded_input,
            **options,
        )


def _validated(items: list[object]) -> list[CreateRunRequest] | None:
    """Every item as a :class:`CreateRunRequest`, in one pass; None when any is invalid."""
    try:
        return _items_adapter().validate_python(items)
    except ValidationError:
        return None


def _inputs_valid(bodies: list[CreateRunRequest], state: ApiState) -> set[str]:
    """The handlers all of whose items' inputs their input model accepts, one pass each."""
    by_handler: dict[str, list[Any]] = {}
    for body in bodies:
        by_handler.setdefault(body.handler, []).append({} if body.input is None else body.input)
    valid = set()
    for name, inputs in by_handler.items():
        try:
            _inputs_adapter(state.registry.get(name).input_model).validate_python(inputs)
        except (UnknownHandler, ValidationError):
            continue  # each of its items judged alone: its own 422
        valid.add(name)
    return valid
