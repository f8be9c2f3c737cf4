"""rediss:// to one node: it works against a TLS port, and says so at once against a plaintext one.

The plaintext case is the session's own redis-server: a TLS client that waited
for its handshake there would wait forever (the server waits for a command).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from app.stack.embedded import find_redis_server, free_port
from app.store.redis import connection
from app.store.redis.connection import TlsHandshakeFailed, async_client, sync_client
from tests.support.clusters import TlsFiles

# the plaintext server never answers the handshake, so each case waits its connect
# timeout out: 1 s instead of the default CONNECT_TIMEOUT_S (5 s), the same check
HANDSHAKE_BOUND_S = 1.0


def rediss(redis_url: str) -> str:
    """The session's plaintext Redis, addressed as if it spoke TLS."""
    parts = urlsplit(redis_url)
    return f"rediss://{parts.netloc}{parts.path}?ssl_cert_reqs=none"


def test_a_sync_client_to_a_plaintext_port_fails_with_a_clear_error(redis_url: str) -> None:
    client = sync_client(rediss(redis_url), connect_timeout_s=HANDSHAKE_BOUND_S)
    started = time.monotonic()
    with pytest.raises(TlsHandshakeFailed, match="is the server speaking TLS"):
        client.ping()
    # bounded by the connect timeout, and not retried (4 attempts would take 4 times as long)
    assert time.monotonic() - started < 3 * HANDSHAKE_BOUND_S
    client.close()


async def test_an_async_client_to_a_plaintext_port_fails_with_a_clear_error(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the async client takes the module's connect timeout: the same bound, shortened
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT_S", HANDSHAKE_BOUND_S)
    client = async_client(rediss(redis_url))
    started = time.monotonic()
    with pytest.raises(TlsHandshakeFailed, match="redis:// is for a plaintext one"):
        await client.ping()
    assert time.monotonic() - started < 3 * HANDSHAKE_BOUND_S
    await client.aclose()


@pytest.fixture
def tls_redis(tls_files: TlsFiles, tmp_path: Path) -> Iterator[str]:
    """One redis-server listening only on a TLS port; yields its rediss:// URL."""
    binary = find_redis_server()
    assert binary is not None
    port = free_port()
    server = subprocess.Popen(
        [str(binary), *tls_files.listen_args(port), "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={tls_files.ca}"
    try:
        deadline = time.monotonic() + 15
        while True:
            probe = sync_client(url, retries=0, connect_timeout_s=1)
            try:
                if probe.ping():
                    break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
            finally:
                probe.close()
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


async def test_both_clients_work_against_a_real_tls_port(tls_redis: str) -> None:
    client = sync_client(tls_redis)
    assert client.ping()
    client.close()
    aclient = async_client(tls_redis)
    await aclient.set("tls-check", "1")
    assert await aclient.get("tls-check") == "1"
    await aclient.aclose()
