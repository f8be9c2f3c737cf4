"""Health probes for containers and orchestrators (``leasehold probe ...``).

Each probe answers one question with a :class:`ProbeResult`; the CLI turns it
into exit status 0 (healthy) or 1, which is what Docker healthchecks and
Kubernetes exec probes read.

* ``api``: does this host's API answer ``path`` with a 2xx? Sends a key from
  ``LEASEHOLD_API_KEY`` or, inside the API's own container, the first of
  ``LEASEHOLD_API_KEYS``, so ``/readyz`` can stay behind authentication.
* ``redis``: can Redis be reached, with the scripts loaded? (readiness)
* ``worker``: is a worker on this host advertised in the registry? The
  advertisement is written by the heartbeat thread every TTL/3 and expires
  after three TTLs, so a missing one means the heartbeat is dead or stuck: the
  one failure a restart fixes. When Redis itself is unreachable the probe passes:
  restarting every worker during an outage would only throw away runs that the
  jeopardy deadline already handles (DESIGN section 5). Likewise when Redis is
  at ``maxmemory``: it refuses the advertisement (a plain SET) while the
  worker's leases and outcomes still get through, and a restart would lose them.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

from redis.exceptions import RedisError

from app.redaction import redacted
from app.settings import Settings
from app.store.health import check_readiness
from app.store.leases import workers
from app.store.lua.scripts import Scripts
from app.store.redis.connection import async_client
from app.store.redis.memory import read_memory

PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ProbeResult:
    """Healthy or not, and one line saying why."""

    healthy: bool
    detail: str


def probe_api(settings: Settings, path: str) -> ProbeResult:
    """GET ``path`` on this host's API; healthy on a 2xx answer."""
    key = settings.api_key or (settings.api_keys[0] if settings.api_keys else None)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = f"{settings.client_api_url}{path}"
    # here: a worker imports this module, and only API probes need httpx
    from app.httpx_import import httpx, verifies

    try:
        # an exec probe runs every few seconds: no CA bundle loaded for a plain-http API
        response = httpx.get(
            url, headers=headers, timeout=PROBE_TIMEOUT_S, verify=verifies(settings.client_api_url)
        )
    except httpx.HTTPError as exc:
        return ProbeResult(False, f"{redacted(url)}: {exc.__class__.__name__}")
    return ProbeResult(response.is_success, f"{redacted(url)}: HTTP {response.status_code}")


def probe_redis(settings: Settings) -> ProbeResult:
    """Redis reachable and the transition scripts loaded."""
    return asyncio.run(_probe_redis(settings))


async def _probe_redis(settings: Settings) -> ProbeResult:
    client = async_client(settings.resolved_redis_url())
    try:
        readiness = await asyncio.wait_for(
            check_readiness(client, Scripts.for_settings(settings)), timeout=PROBE_TIMEOUT_S
        )
    except TimeoutError:
        return ProbeResult(False, "redis did not answer in time")
    finally:
        await client.aclose()
    detail = "; ".join(readiness.problems) or f"ready (policy {readiness.maxmemory_policy})"
    return ProbeResult(readiness.ready, detail)


def probe_worker(settings: Settings, host: str | None = None) -> ProbeResult:
    """A worker on ``host`` (default: this one) is advertised; passes when Redis is down."""
    return asyncio.run(_probe_worker(settings, host or socket.gethostname()))


async def _probe_worker(settings: Settings, host: str) -> ProbeResult:
    client = async_client(settings.resolved_redis_url())
    try:
        live = await asyncio.wait_for(
            workers.list_workers(client, settings.data_prefix, settings.lease_ttl_ms),
            timeout=PROBE_TIMEOUT_S,
        )
        mine = [info.id for info in live if info.host == host]
        full = not mine and (await read_memory(client)).past(1.0)
    except (RedisError, OSError, TimeoutError) as exc:
        return ProbeResult(True, f"redis unreachable ({exc.__class__.__name__}); not judged")
    finally:
        await client.aclose()
    if mine:
        return ProbeResult(True, f"heartbeating: {', '.join(mine)}")
    if full:
        return ProbeResult(True, "redis is at maxmemory and refuses advertisements; not judged")
    return ProbeResult(False, f"no worker on {host} has advertised within three lease TTLs")
