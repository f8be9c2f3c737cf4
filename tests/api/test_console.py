"""The console's files are served without a key; everything with data still needs one."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.api.app import create_app
from app.api.routes.console import CONSOLE_DIR
from app.settings import Settings

KEY = "console-key-0123456789"


@pytest.fixture
async def keyed_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings.model_copy(update={"api_keys": [KEY]}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


def test_the_console_lives_inside_the_package_so_the_wheel_ships_it() -> None:
    package = Path(__file__).resolve().parents[2] / "app"
    assert CONSOLE_DIR.is_relative_to(package)
    assert (CONSOLE_DIR / "index.html").is_file()
    assert (CONSOLE_DIR / "assets" / "app.js").is_file()


async def test_the_page_and_its_assets_load_without_a_key(keyed_api: httpx.AsyncClient) -> None:
    for path in ("/", "/console"):
        page = await keyed_api.get(path)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "/console/assets/app.js" in page.text
    script = await keyed_api.get("/console/assets/app.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")


@pytest.mark.parametrize("path", ["/config", "/runs", "/workers", "/activity", "/console/x"])
async def test_data_still_needs_the_key(keyed_api: httpx.AsyncClient, path: str) -> None:
    response = await keyed_api.get(path)
    assert response.status_code == 401


async def test_config_tells_the_console_the_lease_timing(
    keyed_api: httpx.AsyncClient, settings: Settings
) -> None:
    response = await keyed_api.get("/config", headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200
    config = response.json()
    assert config["lease_ttl_ms"] == settings.lease_ttl_ms
    assert config["heartbeat_interval_ms"] == round(settings.lease_ttl_s / 3 * 1000)
    assert config["auth_required"] is True


async def test_every_console_file_carries_the_security_headers(
    keyed_api: httpx.AsyncClient,
) -> None:
    assets = sorted(path.name for path in (CONSOLE_DIR / "assets").iterdir())
    for path in ["/", "/console", *(f"/console/assets/{name}" for name in assets)]:
        response = await keyed_api.get(path)
        assert response.status_code == 200, path
        policy = response.headers["content-security-policy"]
        assert "default-src 'self'" in policy, path
        assert "frame-ancestors 'none'" in policy, path
        assert response.headers["x-content-type-options"] == "nosniff", path
        assert response.headers["referrer-policy"] == "no-referrer", path
        cached = await keyed_api.get(path, headers={"If-None-Match": response.headers["etag"]})
        if cached.status_code == 304:
            assert "frame-ancestors 'none'" in cached.headers["content-security-policy"]


def test_the_page_has_nothing_inline_that_its_policy_would_block() -> None:
    page = (CONSOLE_DIR / "index.html").read_text()
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts and all("src=" in tag for tag in scripts)
    assert "<style" not in page
    assert not re.search(r"\s(style|on[a-z]+)=", page)
    for script in (CONSOLE_DIR / "assets").glob("*.js"):
        source = script.read_text()
        assert "innerHTML" not in source.replace("without innerHTML", ""), script.name
        assert not re.search(r"setAttribute\(\s*[\"']style", source), script.name
