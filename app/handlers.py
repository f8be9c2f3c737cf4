"""The handler registry: names to functions, with their input models.

``@handler("name")`` registers an async or sync function taking ``(ctx, params)``.
When ``params`` is annotated with a pydantic model, run input is validated
against it by the API before a run is created (and its JSON schema is published
by ``GET /handlers``); otherwise any JSON object is accepted.

``@handler("name", max_attempts=3, on_lease_expired="retry", retry_backoff_s=2,
retry_backoff_max_s=120, budget={"max_duration_s": 600}, versioning="pinned")`` gives the
handler its own
defaults (:class:`HandlerDefaults`), so retries, backoff, budgets and lease policy need
not be one deployment-wide setting. Precedence, per field: what the run's request
names > the handler's default > the deployment's setting (``LEASEHOLD_DEFAULT_MAX_ATTEMPTS``,
``LEASEHOLD_DEFAULT_ON_LEASE_EXPIRED``, ``LEASEHOLD_RETRY_BACKOFF_S``,
``LEASEHOLD_RETRY_BACKOFF_MAX_S``, ``LEASEHOLD_DEFAULT_VERSIONING``; budgets have no
setting). The API applies the
create-time ones (attempts, lease policy, budgets, versioning: the run record keeps what was
decided); the worker applies the backoff when a retryable failure is requeued. The
defaults are validated when the decorator runs, i.e. when the module is imported:
a bad one raises :class:`~app.errors.InvalidHandlerDefaults` naming the handler and
the field, so a worker or API with a typo never starts.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.errors import InvalidHandlerDefaults, InvalidInput, UnknownHandler
from app.models import OnLeaseExpired, RunBudget, Versioning

HandlerFn = Callable[..., Any]
F = TypeVar("F", bound=HandlerFn)


class AnyInput(BaseModel):
    """Input model of handlers that do not declare one: any JSON object."""

    model_config = {"extra": "allow"}


DAY_S = 86_400.0


class HandlerDefaults(BaseModel):
    """A handler's own defaults; each ``None`` falls through to the deployment's setting.

    The bounds are the settings' own (attempts 1-1000, backoff 0-1 day, finite), so a
    handler can never be given what the deployment could not.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int | None = Field(default=None, ge=1, le=1000, strict=True)
    on_lease_expired: OnLeaseExpired | None = None
    retry_backoff_s: float | None = Field(default=None, ge=0, le=DAY_S, allow_inf_nan=False)
    retry_backoff_max_s: float | None = Field(default=None, ge=0, le=DAY_S, allow_inf_nan=False)
    budget: RunBudget | None = None
    versioning: Versioning | None = None

    @model_validator(mode="after")
    def _backoff_in_order(self) -> HandlerDefaults:
        first, cap = self.retry_backoff_s, self.retry_backoff_max_s
        if first is not None and cap is not None and cap < first:
            raise ValueError(f"retry_backoff_max_s ({cap:g}) is below retry_backoff_s ({first:g})")
        return self

    def pinned(
        self, requested: Versioning | None, deployment: Versioning
    ) -> Literal["pinned"] | None:
        """What a new run's record says of its versioning: "pinned", or None for
        auto_upgrade (the record's default, so most runs carry no field). The request
        wins, then the handler's default, then the deployment's setting."""
        chosen = requested or self.versioning or deployment
        return "pinned" if chosen == "pinned" else None

    def merged_budget(self, requested: dict[str, Any] | None) -> dict[str, Any] | None:
        """The run's budgets: each the request names wins, the handler's fills the rest."""
        own = self.budget.model_dump(exclude_none=True) if self.budget else {}
        merged = {**own, **(requested or {})}
        return merged or None


NO_DEFAULTS = HandlerDefaults()


def validated_defaults(name: str, given: dict[str, Any]) -> HandlerDefaults:
    """``given`` as :class:`HandlerDefaults`; raises :class:`InvalidHandlerDefaults`."""
    try:
        return HandlerDefaults.model_validate(given)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'defaults'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        ]
        raise InvalidHandlerDefaults(name, problems) from None


@dataclass(frozen=True)
class HandlerSpec:
    """One registered handler."""

    name: str
    fn: HandlerFn
    is_async: bool
    input_model: type[BaseModel]
    description: str | None
    defaults: HandlerDefaults = NO_DEFAULTS

    def parse_input(self, raw: Any) -> BaseModel:
        """Validate run input; raises :class:`InvalidInput` with pydantic's problems."""
        try:
            return self.input_model.model_validate(raw if raw is not None else {})
        except ValidationError as exc:
            problems = [
                {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]}
                for error in exc.errors(include_url=False, include_context=False)
            ]
            raise InvalidInput(self.name, problems) from None

    def input_schema(self) -> dict[str, Any]:
        """JSON schema of the input, as published by GET /handlers."""
        return self.input_model.model_json_schema()


class HandlerRegistry:
    """Maps handler names to :class:`HandlerSpec`."""

    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}

    def register(
        self, name: str, fn: HandlerFn, defaults: HandlerDefaults = NO_DEFAULTS
    ) -> HandlerSpec:
        """Register ``fn`` under ``name``; re-registering the same function replaces its spec."""
        existing = self._specs.get(name)
        if existing is not None and existing.fn is not fn:
            raise ValueError(f"handler {name!r} is already registered to {existing.fn!r}")
        spec = HandlerSpec(
            name=name,
            fn=fn,
            is_async=inspect.iscoroutinefunction(fn),
            input_model=_input_model(fn),
            description=plain_text(inspect.getdoc(fn)),
            defaults=defaults,
        )
        self._specs[name] = spec
        return spec

    def get(self, name: str) -> HandlerSpec:
        """The handler named ``name``; raises :class:`UnknownHandler`."""
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownHandler(name, list(self._specs)) from None

    def __iter__(self) -> Any:
        return iter(sorted(self._specs.values(), key=lambda spec: spec.name))

    def __len__(self) -> int:
        return len(self._specs)


# reStructuredText inline markup a docstring may carry: ``literal``, :role:`~dotted.target`
_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_ROLE = re.compile(r":[a-z:]+:`~?(?:[\w.]*\.)?([^`<]+?)(?:\s*<[^`]*>)?`")


def plain_text(doc: str | None) -> str | None:
    """A docstring as people read it in GET /handlers and the console: no RST markup.

    Handler docstrings are written for Sphinx (``seconds``, :class:`RunFailure`); shown raw,
    the backticks and roles are noise. Literals and roles keep their text, a trailing
    ``::`` (a literal block follows) becomes ``:``. Not a full RST renderer on purpose: a
    description is a sentence or two.
    """
    if doc is None:
        return None
    text = _RST_ROLE.sub(r"\1", _RST_LITERAL.sub(r"\1", doc))
    return re.sub(r"::$", ":", text, flags=re.MULTILINE)


def _input_model(fn: HandlerFn) -> type[BaseModel]:
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 2:
        raise TypeError(f"handler {fn.__qualname__} must take (ctx, params)")
    hint = get_type_hints(fn).get(params[1].name)
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return hint
    return AnyInput


default_registry = HandlerRegistry()


def handler(
    name: str,
    *,
    registry: HandlerRegistry | None = None,
    max_attempts: int | None = None,
    on_lease_expired: OnLeaseExpired | None = None,
    retry_backoff_s: float | None = None,
    retry_backoff_max_s: float | None = None,
    budget: RunBudget | dict[str, Any] | None = None,
    versioning: Versioning | None = None,
) -> Callable[[F], F]:
    """Decorator: register an async or sync ``(ctx, params)`` function as a handler.

    The keyword arguments are the handler's defaults (see the module docstring for
    their precedence); they are checked here, at import time, and a bad one raises
    :class:`~app.errors.InvalidHandlerDefaults` before anything runs.
    """
    given = {
        "max_attempts": max_attempts,
        "on_lease_expired": on_lease_expired,
        "retry_backoff_s": retry_backoff_s,
        "retry_backoff_max_s": retry_backoff_max_s,
        "budget": budget.model_dump(exclude_none=True) if isinstance(budget, RunBudget) else budget,
        "versioning": versioning,
    }
    defaults = validated_defaults(name, {k: v for k, v in given.items() if v is not None})

    def decorate(fn: F) -> F:
        # `is None`, not `or`: an empty registry is falsy (it has a length)
        (default_registry if registry is None else registry).register(name, fn, defaults)
        return fn

    return decorate


def load_handler_modules(modules: list[str]) -> HandlerRegistry:
    """Import the modules that define handlers (LEASEHOLD_HANDLERS); returns the registry."""
    for module in modules:
        importlib.import_module(module)
    return default_registry
