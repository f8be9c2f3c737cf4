"""``/docs``: Swagger UI served from the package, usable offline and with a bearer key.

FastAPI's own ``/docs`` page loads Swagger UI from a CDN (blank offline or behind a
strict proxy) and cannot send a key, so with ``LEASEHOLD_API_KEYS`` set it could not
even fetch ``/openapi.json``. Here the page is ``app/console/docs.html``, Swagger UI's
files come from the ``fastapi-offline`` package's copy at ``/docs/assets/``, and the page's
script (``/console/assets/docs.js``) asks for the key when the API wants one and adds
it to every request Swagger UI makes. The page and its assets are open like the
console's (they hold no data); ``/openapi.json`` and every call still need the key.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app.api.routes.console import CONSOLE_DIR, NO_CACHE

# only its static files are used, not its FastAPI subclass
SWAGGER_UI_DIR = Path(str(importlib.resources.files("fastapi_offline") / "static"))
DOCS_PATH = "/docs"
DOCS_ASSETS = "/docs/assets"
# Swagger UI sets style attributes as it renders, so inline styles are allowed; scripts
# and everything else only from this origin, as for the console
DOCS_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


async def docs_page() -> FileResponse:
    """The Swagger UI page (it loads the spec itself, with a key when one is needed)."""
    return FileResponse(CONSOLE_DIR / "docs.html", headers={**NO_CACHE, **DOCS_HEADERS})


def install(app: FastAPI) -> None:
    """Serve ``/docs`` and Swagger UI's files on ``app`` (created with ``docs_url=None``)."""
    app.add_api_route(DOCS_PATH, docs_page, methods=["GET"], include_in_schema=False)
    app.mount(DOCS_ASSETS, StaticFiles(directory=SWAGGER_UI_DIR), name="docs-assets")
