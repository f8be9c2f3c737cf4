"""Limits on what a request may carry: body size, and the shape of its JSON.

The body size is checked on ``Content-Length`` up front and again on the bytes
actually received (chunked bodies have no length), so an oversized body is
refused with 413 before it is parsed, and nothing is written.

JSON is parsed strictly (no ``NaN``/``Infinity``) and its nesting depth is
bounded (``LEASEHOLD_MAX_INPUT_DEPTH``): a run's input is stored, replayed to
handlers and served back, so a document that is cheap to send but deep enough to
exhaust a parser's stack somewhere downstream is refused at the door.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(Exception):
    """Raised inside the receive wrapper when the limit is passed."""


class BodySizeLimit:
    """Pure ASGI middleware: 413 problem+json for bodies over ``max_bytes``."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wrap ``receive`` to count body bytes; answer 413 when over the limit."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(send)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = json.dumps(
            {
                "type": "about:blank",
                "title": "Request body too large",
                "status": 413,
                "detail": f"the body exceeds the limit of {self.max_bytes} bytes",
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})


class NestingTooDeep(ValueError):
    """A JSON document nests arrays/objects deeper than the configured limit."""


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def load_json(raw: bytes) -> object:
    """Parse a request body as strict JSON.

    Raises ``ValueError`` for anything that is not RFC 8259 JSON, including
    ``NaN``/``Infinity`` (which would be stored and then served back as invalid
    JSON), lone surrogate escapes (no UTF-8 form) and integers past Python's digit
    limit, and :class:`NestingTooDeep` when
    the parser itself runs out of recursion depth (far past any allowed limit).
    """
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise NestingTooDeep("the JSON nests too deeply to parse") from None
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        # "\ud800" parses in Python but has no UTF-8 form: Redis could not store it
        raise ValueError("a string holds a lone UTF-16 surrogate escape") from None
    return data


def json_depth(value: object) -> int:
    """Nesting depth of parsed JSON: scalars 0, ``{}``/``[]`` 1, ``[[1]]`` 2.

    Iterative, so measuring a hostile document cannot exhaust the stack.
    """
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse_json_body(raw: bytes, *, max_depth: int) -> object:
    """A request body as JSON, every top-level field nested at most ``max_depth`` deep.

    An empty body is None. Raises ``HTTPException(400)`` for invalid JSON and
    :class:`RequestValidationError` (422, naming the field) for nesting past the limit.
    """
    if not raw.strip():
        return None
    try:
        data = load_json(raw)
    except NestingTooDeep:
        raise RequestValidationError([_too_deep(("body",), max_depth)]) from None
    except ValueError as exc:
        raise HTTPException(400, f"the body is not valid JSON: {exc}") from None
    fields = data.items() if isinstance(data, dict) else [(None, data)]
    errors = [
        _too_deep(("body",) if name is None else ("body", name), max_depth)
        for name, value in fields
        if json_depth(value) > max_depth
    ]
    if errors:
        raise RequestValidationError(errors)
    return data


def _too_deep(loc: tuple[str, ...], max_depth: int) -> dict[str, Any]:
    return {
        "loc": loc,
        "msg": f"JSON nests deeper than {max_depth} levels",
        "type": "json_too_deep",
    }
