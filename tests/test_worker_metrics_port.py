"""A worker's metrics port: listens where it is told (loopback by default), takes the
API's bearer keys, and bounds what a client can hold. Real worker processes, real sockets."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from app.errors import ConfigurationError
from app.settings import load_settings
from app.stack.embedded import free_port
from app.stack.processes import Child
from app.telemetry.metrics_server import READ_TIMEOUT_S
from tests.support.polling import eventually
from tests.support.processes import Processes, run_cli

KEY = "metrics-key-0123456789abcdef"
OTHER_KEY = "another-key-0123456789abcdef"
TCP_LISTEN = "0A"


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets LISTENing on ``port`` (Linux /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port_hex = local.split(":")
        if state == TCP_LISTEN and int(port_hex, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


async def get(url: str, **headers: str) -> httpx.Response | None:
    """GET, or None while nothing listens yet."""
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            return await http.get(url, headers=headers)
    except httpx.TransportError:
        return None


async def serving(proc: Child, url: str, **headers: str) -> httpx.Response:
    """The first answer from the worker's metrics port, once it listens."""

    async def probe() -> httpx.Response | None:
        assert proc.alive(), proc.log()
        return await get(url, **headers)

    response = await eventually(probe, until=lambda r: r is not None, what="the metrics port")
    assert response is not None
    return response


@pytest.mark.slow
async def test_the_metrics_port_listens_on_loopback_by_default(processes: Processes) -> None:
    port = free_port()
    proc = processes.worker(LEASEHOLD_WORKER_METRICS_PORT=str(port))
    response = await serving(proc, f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    assert "leasehold_lease_renewals_total" in response.text
    assert listening_addresses(port) == {"127.0.0.1"}


@pytest.mark.slow
async def test_the_metrics_port_listens_where_it_is_told(processes: Processes) -> None:
    """127.0.0.2 is loopback too (all of 127/8), so the test exposes nothing."""
    port = free_port()
    proc = processes.worker(
        LEASEHOLD_WORKER_METRICS_PORT=str(port), LEASEHOLD_WORKER_METRICS_HOST="127.0.0.2"
    )
    response = await serving(proc, f"http://127.0.0.2:{port}/metrics")
    assert response.status_code == 200
    assert listening_addresses(port) == {"127.0.0.2"}
    assert await get(f"http://127.0.0.1:{port}/metrics") is None


@pytest.mark.slow
async def test_with_keys_a_scrape_needs_one_of_them(processes: Processes) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = processes.worker(
        LEASEHOLD_WORKER_METRICS_PORT=str(port), LEASEHOLD_API_KEYS=f"{KEY},{OTHER_KEY}"
    )
    anonymous = await serving(proc, url)
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"] == "application/problem+json"
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert anonymous.json()["status"] == 401
    assert "leasehold_" not in anonymous.text
    for headers in (
        {"Authorization": f"Bearer {KEY}x"},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer " + "k" * 100_000},
    ):
        refused = await get(url, **headers)
        assert refused is not None and refused.status_code in (401, 431), headers
    for key in (KEY, OTHER_KEY):
        scraped = await get(url, Authorization=f"Bearer {key}")
        assert scraped is not None and scraped.status_code == 200
        assert "leasehold_lease_renewals_total" in scraped.text


def test_a_metrics_port_beyond_loopback_without_keys_stops_the_worker_with_exit_2(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env = {
        "LEASEHOLD_REDIS_URL": redis_url,
        "LEASEHOLD_PREFIX": prefix,
        "LEASEHOLD_HANDLERS": "tests.support.handlers",
        "LEASEHOLD_WORKER_METRICS_PORT": str(free_port()),
        "LEASEHOLD_WORKER_METRICS_HOST": "0.0.0.0",
        "PATH": "/usr/bin:/bin",
    }
    returncode, output = run_cli("worker", env=env, log_path=tmp_path / "worker.log")
    assert returncode == 2, output
    assert "LEASEHOLD_WORKER_METRICS_HOST" in output
    assert "LEASEHOLD_API_KEYS" in output


@pytest.mark.slow
async def test_connections_past_the_bound_get_503_and_silent_ones_are_dropped(
    processes: Processes,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = processes.worker(
        LEASEHOLD_WORKER_METRICS_PORT=str(port), LEASEHOLD_WORKER_METRICS_MAX_CONNECTIONS="2"
    )
    assert (await serving(proc, url)).status_code == 200
    # two clients that connect and send nothing hold both slots
    silent = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
    try:
        busy = await eventually(
            lambda: get(url), until=lambda r: r is not None and r.status_code == 503, what="503"
        )
        assert busy is not None
        assert busy.headers["retry-after"] == "1"
        assert busy.headers["content-type"] == "application/problem+json"
        assert busy.json()["status"] == 503
        # the server gives up on them after READ_TIMEOUT_S (the client never closes):
        # each sees its connection closed, without a byte of metrics
        for sock in silent:
            sock.settimeout(READ_TIMEOUT_S * 6)
            assert sock.recv(1024) == b""
    finally:
        for sock in silent:
            sock.close()
    # with the slots given back, scrapes are served again
    freed = await eventually(
        lambda: get(url), until=lambda r: r is not None and r.status_code == 200, what="200"
    )
    assert freed is not None
    assert proc.alive()


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"worker_metrics_host": "bad host!"}, "WORKER_METRICS_HOST"),
        ({"worker_metrics_host": ""}, "WORKER_METRICS_HOST"),
        ({"worker_metrics_host": "h" * 300}, "WORKER_METRICS_HOST"),
        ({"worker_metrics_max_connections": 0}, "WORKER_METRICS_MAX_CONNECTIONS"),
        ({"worker_metrics_max_connections": 10**6}, "WORKER_METRICS_MAX_CONNECTIONS"),
        ({"worker_metrics_port": 9100, "worker_metrics_host": "::"}, "API_KEYS"),
        ({"worker_metrics_port": 9100, "worker_metrics_host": "10.0.0.5"}, "API_KEYS"),
    ],
)
def test_bad_metrics_settings_are_refused(overrides: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        load_settings(**overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        {"worker_metrics_port": 9100},
        {"worker_metrics_port": 9100, "worker_metrics_host": "::1"},
        {"worker_metrics_port": 9100, "worker_metrics_host": "localhost"},
        {"worker_metrics_port": 9100, "worker_metrics_host": "0.0.0.0", "api_keys": KEY},
        {"worker_metrics_port": 0, "worker_metrics_host": "0.0.0.0"},
    ],
)
def test_loopback_or_keyed_metrics_settings_are_accepted(overrides: dict[str, object]) -> None:
    settings = load_settings(**overrides)
    assert settings.worker_metrics_port == overrides["worker_metrics_port"]
    assert settings.worker_metrics_host == overrides.get("worker_metrics_host", "127.0.0.1")
