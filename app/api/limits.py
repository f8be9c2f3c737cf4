"""The limit on how much a request may carry: its body size.

The body size is checked on ``Content-Length`` up front and again on the bytes
actually received (chunked bodies have no length), so an oversized body is
refused with 413 before it is parsed, and nothing is written. What a JSON body
may contain (its label, depth and numbers) is app/api/bodies.py's rule.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import PROBLEM_BASE


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
                "type": PROBLEM_BASE + "request-too-large",
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
