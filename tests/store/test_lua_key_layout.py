"""The key names the Lua includes derive by string-matching are the ones store/keys.py builds.

Scripts derive a queue's sibling keys (activity stream, parked and unclaimed
indexes, effects and waits hashes, per-minute series) from a run prefix or an events key
instead of taking a KEYS slot for each. Those derivations run here, in Redis, on
the names :class:`QueueKeys` builds, so the two layouts cannot drift apart.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from app.store.keys import QueueKeys
from tests.support.lua import snippet

RUN_ID = "some.queue.01JABCDEFGHJKMNPQRSTVWXYZ0"
MINUTE = 29_123_456

DERIVED = """
local activity, run_id = activity_of(ARGV[2])
return {
  activity, run_id,
  parked_of(ARGV[1]),
  waiting_of(ARGV[1]),
  unclaimed_key_of(ARGV[1]),
  effects_key_of(ARGV[1], ARGV[3]),
  waits_key_of(ARGV[1], ARGV[3]),
  queue_key_of(ARGV[1], 'series:' .. ARGV[4]),
  children_key_of(ARGV[1], ARGV[3]),
  family_key_of(ARGV[1], ARGV[3]),
  create_template_of(ARGV[5]),
}
"""


async def test_the_includes_derive_the_keys_keys_py_builds(redis_client: aioredis.Redis) -> None:
    derived_keys = snippet(DERIVED, "args", "keys", "events")
    for queue in ("default", "some.queue", "a-b_c"):
        keys = QueueKeys("lh:test", queue)
        derived = await redis_client.eval(
            derived_keys, 0, keys.run_prefix, keys.events(RUN_ID), RUN_ID, MINUTE, keys.ready
        )
        assert derived == [
            keys.activity,
            RUN_ID,
            keys.parked,
            keys.waiting,
            keys.unclaimed,
            keys.effects(RUN_ID),
            keys.waits(RUN_ID),
            keys.series(MINUTE),
            keys.children(RUN_ID),
            keys.family(RUN_ID),
            keys.create_template,
        ], queue


async def test_count_outcome_writes_the_series_key_keys_py_reads(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    """count_outcome's own minute bucket (by the Redis clock) is a ``QueueKeys.series`` name."""
    keys = QueueKeys(prefix, "default")
    minute = await redis_client.eval(
        snippet(
            "local now = now_ms()\ncount_outcome(ARGV[1], 'succeeded', now)\n"
            "return math.floor(now / 60000)",
            "args",
            "keys",
            "finalize",
        ),
        0,
        keys.run_prefix,
    )
    assert await redis_client.hget(keys.series(int(minute)), "succeeded") == "1"
