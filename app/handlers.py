"""The handler registry: names to functions, with their input models.

``@handler("name")`` registers an async or sync function taking ``(ctx, params)``.
When ``params`` is annotated with a pydantic model, run input is validated
against it by the API before a run is created (and its JSON schema is published
by ``GET /handlers``); otherwise any JSON object is accepted.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, get_type_hints

from pydantic import BaseModel, ValidationError

from app.errors import InvalidInput, UnknownHandler

HandlerFn = Callable[..., Any]
F = TypeVar("F", bound=HandlerFn)


class AnyInput(BaseModel):
    """Input model of handlers that do not declare one: any JSON object."""

    model_config = {"extra": "allow"}


@dataclass(frozen=True)
class HandlerSpec:
    """One registered handler."""

    name: str
    fn: HandlerFn
    is_async: bool
    input_model: type[BaseModel]
    description: str | None

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

    def register(self, name: str, fn: HandlerFn) -> HandlerSpec:
        """Register ``fn`` under ``name``; re-registering the same function is a no-op."""
        existing = self._specs.get(name)
        if existing is not None and existing.fn is not fn:
            raise ValueError(f"handler {name!r} is already registered to {existing.fn!r}")
        spec = HandlerSpec(
            name=name,
            fn=fn,
            is_async=inspect.iscoroutinefunction(fn),
            input_model=_input_model(fn),
            description=plain_text(inspect.getdoc(fn)),
        )
        self._specs[name] = spec
        return spec

    def get(self, name: str) -> HandlerSpec:
        """The handler named ``name``; raises :class:`UnknownHandler`."""
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownHandler(name) from None

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


def handler(name: str, *, registry: HandlerRegistry | None = None) -> Callable[[F], F]:
    """Decorator: register an async or sync ``(ctx, params)`` function as a handler."""

    def decorate(fn: F) -> F:
        (registry or default_registry).register(name, fn)
        return fn

    return decorate


def load_handler_modules(modules: list[str]) -> HandlerRegistry:
    """Import the modules that define handlers (LEASEHOLD_HANDLERS); returns the registry."""
    for module in modules:
        importlib.import_module(module)
    return default_registry
