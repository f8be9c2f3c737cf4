"""The one rule every JSON request body goes through: label, syntax, depth, numbers.

Every endpoint that takes a JSON body declares it with :func:`json_body` (or
:func:`optional_json_body`), never as a bare pydantic parameter, so each gets the
same answers:

* **Content type.** The body must be labelled ``application/json`` or
  ``application/<something>+json`` (parameters such as ``; charset=utf-8`` are
  fine); anything else, or no label on a non-empty body, is 415 naming the type
  received and the one expected. This is also what keeps a page on another
  origin from creating runs: a browser sends a cross-origin ``no-cors`` POST only
  with a "simple" type (``text/plain``, form types), never with
  ``application/json`` unless a CORS preflight allowed it. An empty body with no
  label, where the body is optional (resume without an input), is no body.
* **Syntax.** Strict RFC 8259 JSON (400 otherwise): no lone surrogate escapes,
  which Redis could not store as UTF-8.
* **Depth.** Each top-level field nests at most ``LEASEHOLD_MAX_INPUT_DEPTH``
  deep (422 naming the field): inputs are stored, replayed to handlers and
  served back, so a document cheap to send but deep enough to exhaust a parser's
  stack downstream is refused at the door.
* **Keys.** An object that names one key twice, at any depth, is 422 naming the key:
  a parser keeps one of the two values (Python's the last, others the first), so a
  proxy or signer that read the other one would disagree with what is stored.
* **Numbers.** ``NaN``, ``Infinity``, ``-Infinity`` and literals that overflow a
  double (``1e400``) are 422 naming where they are: JSON has no such numbers,
  Python would store them as the invalid token ``Infinity``, and the Lua
  scripts' cjson refuses to encode them.

The body size is bounded before any of this by :class:`app.api.limits.BodySizeLimit`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from app.api.state import api_state

M = TypeVar("M", bound=BaseModel)

# application/json, application/problem+json, application/merge-patch+json, ...
_JSON_MEDIA_TYPE = re.compile(r"application/(?:[a-z0-9!#$&^_.-]+\+)?json")
# where a UTF-8 body can hold a UTF-16 surrogate: a \uD800-\uDFFF escape (any case), or
# the three bytes that would encode one (json.loads decodes bytes with surrogatepass);
# a body without either needs no second encoding to prove it has a UTF-8 form
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
EXPECTED_MEDIA_TYPE = "application/json"
# JSON values that nest nothing and are always finite (bool is an int)
_SCALARS = (str, int, type(None))
# the exact types of those a JSON parser makes (bool is an int)
_SCALAR_TYPES = frozenset((str, int, bool, type(None)))
# how many offending values one 422 lists at most
_MAX_REPORTED = 10


class NestingTooDeep(ValueError):
    """A JSON document nests arrays/objects deeper than the parser can follow."""


class DuplicateKey(ValueError):
    """A JSON object names the same key twice; ``key`` is the first one repeated."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key[:80]!r} appears twice in one object")
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The parser's object hook: the object, or :class:`DuplicateKey`.

    One call per object, ~0.2 µs: ~0.4 µs of the ~0.5 ms a 1,000-item batch takes to parse.
    """
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen.add(key)
    raise AssertionError("unreachable: fewer keys than pairs means one repeats")


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower case, without parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def require_json_label(content_type: str | None, *, has_body: bool) -> None:
    """Refuse (415) a body not labelled as JSON; an empty, unlabelled body passes.

    The detail names what was received and what is expected, so ``curl -d``
    without ``-H 'content-type: application/json'`` learns exactly what to add.
    """
    media = media_type(content_type)
    if _JSON_MEDIA_TYPE.fullmatch(media) or (not media and not has_body):
        return
    received = f"Content-Type {media!r}" if media else "no Content-Type"
    raise HTTPException(
        415,
        f"the body was sent with {received}; JSON bodies must be sent with "
        f"Content-Type: {EXPECTED_MEDIA_TYPE}",
    )


def load_json(raw: bytes) -> object:
    """Parse a request body as JSON, keeping non-finite numbers for :func:`non_finite`.

    Raises ``ValueError`` for anything that is not JSON, lone surrogate escapes
    (no UTF-8 form) and integers past Python's digit limit, :class:`DuplicateKey`
    for an object that names a key twice, and :class:`NestingTooDeep` when the
    parser itself runs out of recursion depth (far past any allowed limit).
    """
    try:
        data = json.loads(raw, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise NestingTooDeep("the JSON nests too deeply to parse") from None
    if json.detect_encoding(raw) == "utf-8" and not _may_hold_surrogate(raw):
        return data  # no escape or UTF-8 form of a surrogate: nothing to re-encode
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        # "\ud800" parses in Python but has no UTF-8 form: Redis could not store it
        raise ValueError("a string holds a lone UTF-16 surrogate escape") from None
    return data


def _may_hold_surrogate(raw: bytes) -> bool:
    """Whether a UTF-8 body may hold a lone surrogate (a pair answers yes too: then re-encoded).

    ``in`` first (C memchr speed over a 1,000-item batch), the pattern only when
    a ``\\u`` escape or an 0xED byte is there at all.
    """
    return (b"\\u" in raw or b"\xed" in raw) and _MAYBE_SURROGATE.search(raw) is not None


def non_finite(value: object) -> list[tuple[str | int, ...]]:
    """Where parsed JSON holds NaN or ±Infinity (``1e400`` parses to inf), first ones first.

    Iterative like :func:`depth_and_non_finite`; stops after a few, enough to say what is wrong.
    """
    found: list[tuple[str | int, ...]] = []
    stack: list[tuple[object, tuple[str | int, ...]]] = [(value, ())]
    while stack and len(found) < _MAX_REPORTED:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            found.append(path)
        elif isinstance(item, dict):
            stack.extend((child, (*path, key)) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((child, (*path, i)) for i, child in reversed(list(enumerate(item))))
    return found


def parse_json_body(raw: bytes, *, max_depth: int) -> object:
    """A request body as JSON that every store and script can hold; empty is None.

    Raises ``HTTPException(400)`` for invalid JSON and :class:`RequestValidationError`
    (422, naming where) for a top-level field nested past ``max_depth`` or a
    non-finite number anywhere.
    """
    data = _syntax_checked(raw, max_depth=max_depth)
    errors = content_errors(data, max_depth=max_depth, loc=("body",))
    if errors:
        raise RequestValidationError(errors)
    return data


def _syntax_checked(raw: bytes, *, max_depth: int) -> object:
    """The body parsed (None when empty); 400 when it is not JSON, 422 past the parser's depth."""
    if not raw.strip():
        return None
    try:
        return load_json(raw)
    except NestingTooDeep:
        raise RequestValidationError([_too_deep(("body",), max_depth)]) from None
    except DuplicateKey as exc:
        raise RequestValidationError([_duplicate_key(("body",), exc)]) from None
    except ValueError as exc:
        raise HTTPException(400, f"the body is not valid JSON: {exc}") from None


def content_errors(
    data: object, *, max_depth: int, loc: tuple[str | int, ...]
) -> list[dict[str, Any]]:
    """What the content rule finds in parsed JSON at ``loc``: depth per field, non-finite numbers.

    Each top-level field of an object (else the value itself) may nest at most
    ``max_depth`` deep. A batch applies it to each of its items on its own, so
    one bad item is refused alone.
    """
    fields = data.items() if isinstance(data, dict) else [(None, data)]
    errors: list[dict[str, Any]] = []
    any_non_finite = False
    for name, value in fields:
        if isinstance(value, _SCALARS):  # most fields of an item: nothing to walk
            continue
        if type(value) is dict and (
            _SCALAR_TYPES.issuperset(map(type, value.values()))  # in C: no frame per value
            or all(isinstance(v, _SCALARS) for v in value.values())
        ):
            continue  # an object of strings and integers (most inputs): depth 1, all finite
        depth, value_non_finite = depth_and_non_finite(value)
        if depth > max_depth:
            errors.append(_too_deep(loc if name is None else (*loc, name), max_depth))
        any_non_finite = any_non_finite or value_non_finite
    if any_non_finite:  # only then the walk that names where
        errors += [_not_finite((*loc, *path)) for path in non_finite(data)]
    return errors


def depth_and_non_finite(value: object) -> tuple[int, bool]:
    """Nesting depth of parsed JSON (scalars 0, ``{}``/``[]`` 1, ``[[1]]`` 2), and whether
    it holds a non-finite number, in one walk.

    Iterative, so measuring a hostile document cannot exhaust the stack. It
    builds no paths: the content rule runs on every item of a batch (1,000 per
    request), and a clean item costs this one pass.
    """
    deepest = 0
    found = False
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            found = found or (isinstance(item, float) and not math.isfinite(item))
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest, found


async def raw_json_body(request: Request) -> object:
    """The body parsed as JSON (label and syntax checked), its content not yet judged.

    For a body of many items judged one by one with :func:`content_errors`; a
    body nested past what the parser can follow is still refused whole (422).
    """
    raw = await request.body()
    require_json_label(request.headers.get("content-type"), has_body=bool(raw.strip()))
    return _syntax_checked(raw, max_depth=api_state(request).settings.max_input_depth)


def json_body(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A dependency that reads a required JSON body as ``model`` by the rule above.

    Use it as ``body: Annotated[Model, Depends(json_body(Model))]`` together with
    ``openapi_extra=body_doc(Model)``, so the schema still documents the body.
    """

    async def read(request: Request) -> M:
        data = await _read(request)
        if data is None:
            raise RequestValidationError(
                [{"loc": ("body",), "msg": "a JSON body is required", "type": "missing"}]
            )
        return _validate(model, data)

    return read


def optional_json_body(model: type[M]) -> Callable[[Request], Awaitable[M | None]]:
    """:func:`json_body` for a body that may be left out: no body at all is None."""

    async def read(request: Request) -> M | None:
        data = await _read(request)
        return None if data is None else _validate(model, data)

    return read


def body_doc(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """The ``openapi_extra`` that documents a :func:`json_body` body in the schema."""
    return {
        "requestBody": {
            "required": required,
            "content": {EXPECTED_MEDIA_TYPE: {"schema": model.model_json_schema()}},
        }
    }


async def _read(request: Request) -> object:
    raw = await request.body()
    require_json_label(request.headers.get("content-type"), has_body=bool(raw.strip()))
    return parse_json_body(raw, max_depth=api_state(request).settings.max_input_depth)


def _validate(model: type[M], data: object) -> M:
    return validate_json(model, data, loc=("body",))


def validate_json(model: type[M], data: object, *, loc: tuple[str | int, ...]) -> M:
    """``data`` as ``model``; raises :class:`RequestValidationError` located under ``loc``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [
                {**error, "loc": (*loc, *error["loc"])}
                for error in exc.errors(include_url=False, include_context=False)
            ]
        ) from None


def _too_deep(loc: tuple[str | int, ...], max_depth: int) -> dict[str, Any]:
    return {
        "loc": loc,
        "msg": f"JSON nests deeper than {max_depth} levels",
        "type": "json_too_deep",
    }


def _duplicate_key(loc: tuple[str | int, ...], exc: DuplicateKey) -> dict[str, Any]:
    return {"loc": loc, "msg": str(exc), "type": "json_duplicate_key"}


def _not_finite(loc: tuple[str | int, ...]) -> dict[str, Any]:
    return {
        "loc": loc,
        "msg": "not a finite number: NaN, Infinity and numbers too large for a double "
        "(such as 1e400) cannot be stored",
        "type": "json_not_finite",
    }
