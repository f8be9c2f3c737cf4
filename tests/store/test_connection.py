"""The Redis URL alone picks the mode; a URL we cannot use is refused before any socket opens."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from app.errors import ConfigurationError
from app.settings import load_settings
from app.store.connection import (
    InvalidRedisUrl,
    async_client,
    mode_of,
    parse_redis_url,
    sync_client,
)


def test_single_node_urls_are_handed_to_redis_py_unchanged() -> None:
    for url in ("redis://localhost:6379/2", "rediss://:pw@cache:6380/0", "unix:///tmp/r.sock"):
        target = parse_redis_url(url)
        assert target.mode == "single"
        assert target.url == url
    assert parse_redis_url("rediss://h:1").tls


def test_cluster_url_lists_seed_nodes_and_credentials() -> None:
    target = parse_redis_url("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002")
    assert target.mode == "cluster"
    assert target.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002))
    assert (target.username, target.password) == ("app", "s@cret")
    assert not target.tls


def test_tls_cluster_url_takes_certificate_options() -> None:
    target = parse_redis_url(
        "rediss+cluster://:pw@h1:7000,h2:7000/?ssl_cert_reqs=none&ssl_check_hostname=false"
        "&ssl_ca_certs=/etc/ca.pem"
    )
    assert target.tls
    assert target.username is None and target.password == "pw"
    assert target.tls_options == {
        "ssl_cert_reqs": "none",
        "ssl_check_hostname": False,
        "ssl_ca_certs": "/etc/ca.pem",
    }


def test_sentinel_url_names_sentinels_service_and_database() -> None:
    target = parse_redis_url(
        "redis+sentinel://:datapw@s1:26379,s2:26379,s3:26379/mymaster/3?sentinel_password=sentpw"
    )
    assert target.mode == "sentinel"
    assert target.seeds == ["s1:26379", "s2:26379", "s3:26379"]
    assert (target.service_name, target.db) == ("mymaster", 3)
    assert target.password == "datapw"
    assert target.sentinel_auth == {"sentinel_password": "sentpw"}


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("http://h:1", "scheme"),
        ("redis+cluster://h1:7000,h2", "host:port"),
        ("redis+cluster://h1:7000/2", "database 0"),
        ("redis+sentinel://s1:26379", "service_name"),
        ("redis+sentinel://s1:26379/mymaster/x", "service_name"),
        ("redis+cluster://h1:7000/?ssl_cert_reqs=none", "rediss"),
        ("rediss+cluster://h1:7000/?ssl_cert_reqs=maybe", "ssl_cert_reqs"),
        ("redis+cluster://h1:7000/?socket_timeout=1", "socket_timeout"),
    ],
)
def test_unusable_urls_are_refused_with_a_reason(url: str, complaint: str) -> None:
    with pytest.raises(InvalidRedisUrl, match=complaint):
        parse_redis_url(url)


def test_an_invalid_url_stops_settings_without_echoing_the_password() -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(redis_url="redis+sentinel://:hunter2@s1:26379")
    message = str(caught.value)
    assert "LEASEHOLD_REDIS_URL" in message and "service_name" in message
    assert "hunter2" not in message


async def test_every_mode_builds_its_client_without_connecting() -> None:
    cluster = async_client("redis+cluster://127.0.0.1:1,127.0.0.1:2")
    sentinel = async_client("redis+sentinel://127.0.0.1:1/mymaster")
    single = async_client("redis://127.0.0.1:1/0")
    assert isinstance(cluster, aioredis.RedisCluster)
    assert [mode_of(c) for c in (single, cluster, sentinel)] == ["single", "cluster", "sentinel"]
    for client in (single, cluster, sentinel):
        await client.aclose()
    # (redis-py's sync cluster client reads the slot map in its constructor: see tests/cluster)
    blocking = sync_client("redis+sentinel://127.0.0.1:1/mymaster", socket_timeout_s=0.1)
    assert mode_of(blocking) == "sentinel"
    blocking.close()
