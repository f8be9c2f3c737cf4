"""The web console: static files at ``/`` and ``/console``, and GET /config for it.

The console is plain HTML, CSS and JavaScript in ``app/console/`` (shipped in the
wheel with the package), served as they are: no build step. The page and its
assets need no key, so it can load and ask for one (see ``app.api.auth``); every
call it makes afterwards sends the key, GET /config included.

Every console file is served with :data:`CONSOLE_HEADERS`: a Content Security
Policy that allows only this origin's own scripts, styles and calls (the page
has no inline script or style, and builds its DOM without ``innerHTML``), no
framing (clickjacking), no MIME sniffing and no Referer to other sites.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

from app import __version__
from app.api.routes.runs import State
from app.models.api import ConsoleConfig

CONSOLE_DIR = Path(__file__).resolve().parent.parent.parent / "console"
# the page changes with the package: revalidate rather than trust a stale copy
NO_CACHE = {"Cache-Control": "no-cache"}
CONSOLE_HEADERS = {
    # data: for the empty favicon only; everything else from this origin
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

router = APIRouter()


async def console_page() -> FileResponse:
    """The console's single page; it routes by URL fragment (``#/runs/<id>``)."""
    return FileResponse(CONSOLE_DIR / "index.html", headers={**NO_CACHE, **CONSOLE_HEADERS})


class ConsoleAssets(StaticFiles):
    """The console's static files, each with the console's security headers."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        """The file (or 304) as StaticFiles serves it, plus :data:`CONSOLE_HEADERS`."""
        response = await super().get_response(path, scope)
        response.headers.update(CONSOLE_HEADERS)
        return response


@router.get("/config", response_model=ConsoleConfig, tags=["console"])
async def console_config(state: State) -> ConsoleConfig:
    """What the console needs to judge liveness by itself: the lease timing and the clock.

    ``now`` is this API's clock; the console compares worker heartbeats with it
    rather than with the browser's, which may be off by minutes.
    """
    settings = state.settings
    return ConsoleConfig(
        version=__version__,
        now=datetime.now(tz=UTC),
        lease_ttl_ms=settings.lease_ttl_ms,
        heartbeat_interval_ms=round(settings.renew_interval_s * 1000),
        auth_required=bool(settings.api_keys),
    )


def install(app: FastAPI) -> None:
    """Serve the console page, its assets and its config on ``app``."""
    app.include_router(router)
    # on the app itself, not a router: outside the schema, but listed in app.routes
    for path in ("/", "/console"):
        app.add_api_route(path, console_page, methods=["GET"], include_in_schema=False)
    app.mount(
        "/console/assets",
        ConsoleAssets(directory=CONSOLE_DIR / "assets"),
        name="console-assets",
    )
