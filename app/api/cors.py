"""CORS: off unless ``LEASEHOLD_CORS_ORIGINS`` names the browser origins allowed.

Off by default because the API is meant for servers and the CLI; a browser app
on another origin must be named explicitly (``*`` allows any origin, without
credentials). Installed outside authentication, so a preflight ``OPTIONS``
(which browsers send without the ``Authorization`` header) is answered, while
the real request still needs its key.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

ALLOWED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
ALLOWED_HEADERS = ("Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID")
EXPOSED_HEADERS = ("Location", "Idempotency-Replayed")
PREFLIGHT_MAX_AGE_S = 600


def install_cors(app: FastAPI, origins: list[str]) -> None:
    """Answer CORS for ``origins``; no-op when the list is empty. Call after other middleware."""
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_methods=ALLOWED_METHODS,
        allow_headers=ALLOWED_HEADERS,
        expose_headers=EXPOSED_HEADERS,
        allow_credentials=False,
        max_age=PREFLIGHT_MAX_AGE_S,
    )
