"""Trusted hosts: a Host header nobody named gets 400 problem+json (DNS rebinding)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import pytest

from app.api.app import create_app
from app.api.hosts import host_allowed, trusted_hosts
from app.errors import ConfigurationError
from app.settings import Settings
from tests.support.processes import Processes


def raw_get(url: str, path: str, host: bytes | None) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request with exactly the Host header given (or none), on a real socket."""
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    head = f"GET {path} HTTP/1.1\r\n".encode()
    if host is not None:
        head += b"Host: " + host + b"\r\n"
    head += b"Connection: close\r\n\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65_536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    header_block, _, body = rest.partition(b"\r\n\r\n")
    headers = {}
    for line in header_block.decode().split("\r\n"):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def test_a_real_server_refuses_a_foreign_host_and_answers_its_own(processes: Processes) -> None:
    _, url = processes.api()
    port = str(urlsplit(url).port).encode()
    for foreign in (b"attacker.example", b"attacker.example:" + port, b"127.0.0.1.evil.example"):
        status, headers, body = raw_get(url, "/runs", foreign)
        assert status == 400, foreign
        assert headers["content-type"] == "application/problem+json"
        assert b"LEASEHOLD_TRUSTED_HOSTS" in body
    assert raw_get(url, "/runs", None)[0] == 400
    for own in (b"127.0.0.1:" + port, b"localhost:" + port, b"LOCALHOST", b"[::1]:" + port):
        assert raw_get(url, "/runs", own)[0] == 200, own
    # orchestrators probe liveness by the pod's address
    assert raw_get(url, "/healthz", b"10.1.2.3:8000")[0] == 200


def test_named_hosts_are_answered_and_others_are_not(processes: Processes) -> None:
    _, url = processes.api(LEASEHOLD_TRUSTED_HOSTS="leasehold.example, *.corp.example")
    assert raw_get(url, "/runs", b"leasehold.example")[0] == 200
    assert raw_get(url, "/runs", b"api.corp.example:443")[0] == 200
    assert raw_get(url, "/runs", b"corp.example")[0] == 400  # *.domain means subdomains
    assert raw_get(url, "/runs", b"evilcorp.example")[0] == 400
    assert raw_get(url, "/runs", b"127.0.0.1")[0] == 200  # loopback stays trusted


def test_an_exposed_api_without_trusted_hosts_refuses_to_start(processes: Processes) -> None:
    # refused while building the app, before uvicorn binds anything
    api = processes.spawn("api", ["api", "--host", "0.0.0.0", "--port", "0"])
    assert api.wait(timeout_s=60) == 2
    lines = [line for line in api.log().splitlines() if line.strip()]
    # the process's one start line (the Redis and API it uses), then the refusal: one line
    assert len(lines) == 2 and " app.cli: Redis " in lines[0], lines
    assert "LEASEHOLD_TRUSTED_HOSTS" in lines[1] and "Traceback" not in api.log()


@pytest.mark.parametrize("bad", ["http://leasehold.example", "leasehold.example:8000", "a b"])
def test_a_trusted_host_that_is_not_a_host_name_is_a_setting_error(
    settings: Settings, bad: str
) -> None:
    with pytest.raises(ConfigurationError, match="LEASEHOLD_TRUSTED_HOSTS"):
        trusted_hosts(settings.model_copy(update={"trusted_hosts": [bad]}))


def test_star_answers_any_host_even_none() -> None:
    assert host_allowed("anything.example", {"*"})
    assert host_allowed(None, {"*"})
    assert not host_allowed(None, {"localhost"})


@pytest.fixture
async def star_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    exposed = settings.model_copy(update={"api_host": "0.0.0.0", "trusted_hosts": ["*"]})
    app = create_app(exposed)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://whatever") as client:
            yield client


async def test_an_explicit_star_lets_an_exposed_api_answer_every_host(
    star_api: httpx.AsyncClient,
) -> None:
    assert (await star_api.get("/runs")).status_code == 200
