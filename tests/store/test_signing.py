"""The signing room: one key made on first use, rotation, old keys kept then forgotten."""

from __future__ import annotations

import asyncio

import jwt
import redis.asyncio as aioredis

from app.store.keys import GlobalKeys
from app.store.signing import store as signing_store
from app.store.signing.store import SigningKeys
from app.tokens.verify import decode


def keys(client: aioredis.Redis, prefix: str, *, rotate_ms: int = 86_400_000) -> SigningKeys:
    return SigningKeys(client, prefix=prefix, rotate_ms=rotate_ms, max_token_ms=1000)


async def test_the_first_use_makes_one_key_that_every_process_shares(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    first, second = keys(redis_client, prefix), keys(redis_client, prefix)
    claims = {"sub": "r", "aud": "a", "iat": 0, "exp": 2**40}
    token, _ = await asyncio.gather(first.sign(claims), second.sign(claims))
    assert decode(token, await second.public_keys(fresh=True), audience="a")["sub"] == "r"
    assert await redis_client.hlen(GlobalKeys(prefix).signing_keys) == len(
        (await second.public_keys())["keys"]
    )


async def test_rotation_signs_with_a_new_key_and_keeps_the_old_one_published(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    signer = keys(redis_client, prefix, rotate_ms=200)
    signer.retain_ms = 60_000
    old = await signer.sign({"sub": "r", "aud": "a", "iat": 0, "exp": 2**40})
    await asyncio.sleep(0.25)
    signer._read_at = -signing_store.REFRESH_S  # the refresh period is over
    new = await signer.sign({"sub": "r", "aud": "a", "iat": 0, "exp": 2**40})
    old_kid, new_kid = (jwt.get_unverified_header(t)["kid"] for t in (old, new))
    assert old_kid != new_kid
    published = await signer.public_keys()
    assert {old_kid, new_kid} <= {key["kid"] for key in published["keys"]}
    assert decode(old, published, audience="a")["sub"] == "r", "old tokens still verify"


async def test_a_replaced_key_is_forgotten_once_its_tokens_have_expired(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    signer = keys(redis_client, prefix, rotate_ms=100)
    signer.retain_ms = 100
    old = await signer.sign({"sub": "r", "aud": "a", "iat": 0, "exp": 2**40})
    for _ in range(3):
        await asyncio.sleep(0.15)
        await signer.sign({"sub": "r", "aud": "a", "iat": 0, "exp": 2**40})
        signer._read_at = -signing_store.REFRESH_S
    published = {key["kid"] for key in (await signer.public_keys())["keys"]}
    assert jwt.get_unverified_header(old)["kid"] not in published
    assert await redis_client.hlen(GlobalKeys(prefix).signing_keys) == len(published)


async def test_reading_the_key_set_writes_nothing(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    assert await keys(redis_client, prefix).public_keys() == {"keys": []}
    assert await redis_client.exists(GlobalKeys(prefix).signing_keys) == 0


async def test_a_garbage_record_in_redis_is_never_signed_with(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    await redis_client.hset(GlobalKeys(prefix).signing_keys, "zzz", '{"kid": "zzz"}')
    signer = keys(redis_client, prefix)
    token = await signer.sign({"sub": "r", "aud": "a", "iat": 0, "exp": 2**40})
    assert jwt.get_unverified_header(token)["kid"] != "zzz"
