"""Listens on the queues' pub/sub channels and turns messages into worker actions.

* ``<tag>:wake``   → the queue's courier looks for work (a run became ready);
* ``<tag>:cancel`` → a run this worker holds is stopped at once, without waiting
  for the next renewal to carry the request.

Pub/sub is best effort: messages sent while the connection is down are lost.
That is safe here because both signals have a durable twin: couriers claim on a
timer and after every reconnect, and every renewal answers CANCEL for a run
whose cancel was requested.

The worker subscribes before its couriers claim (:attr:`ChannelListener.subscribed`,
the subscription made while the scripts load): a run claimed before the first
subscription could miss its cancel push and run until the next renewal (TTL/3).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.exceptions import RedisError

from app.retry import REDIS_BACKOFF
from app.store.keys import QueueKeys
from app.store.redis.connection import AsyncRedis
from app.store.redis.refusals import describe

log = logging.getLogger(__name__)


class ChannelListener:
    """One subscription (one connection) per worker, for every queue it serves."""

    def __init__(
        self,
        client: AsyncRedis,
        *,
        queue_keys: list[QueueKeys],
        on_ready: Callable[[str], None],
        on_cancel: Callable[[str, int], None],
    ) -> None:
        self._client = client
        self._on_ready = on_ready
        self._on_cancel = on_cancel
        self._wake = {keys.wake_channel: keys.queue for keys in queue_keys}
        self._cancel = {keys.cancel_channel for keys in queue_keys}
        # set once the first subscription is made, and stays set (the worker's couriers
        # wait for it before their first claim)
        self.subscribed = asyncio.Event()

    async def run_forever(self) -> None:
        """Subscribe, dispatch, and resubscribe after any failure, after a jittered backoff.

        The worker must keep listening whatever Redis answered; the jitter keeps a
        fleet of workers from resubscribing in one wave after a Redis restart.
        """
        failures = REDIS_BACKOFF.streak()
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(*self._wake, *self._cancel)
                failures.reset()
                while True:
                    # the raw reply, not listen(): its per-message dict and hooks cost
                    # ~2x the read itself, on the path from a create to its run's start
                    reply = await pubsub.parse_response(block=True)
                    if not reply:
                        continue
                    if reply[0] == "message" and self._dispatch(reply[1], reply[2]):
                        # the courier just woken goes first: its claim is sent before this
                        # task reads the socket again (one loop pass, off the start path)
                        await asyncio.sleep(0)
                    elif reply[0] == "subscribe" and reply[2] == 1:
                        self._subscribed()
            except (RedisError, OSError) as exc:
                await failures.wait(exc, what="channel subscription", why=describe(exc), logger=log)
            finally:
                # untyped in redis-py 8.1, typed in 8.2: the ignore holds for both
                await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]

    def _subscribed(self) -> None:
        """Redis confirmed the subscription: from now on no push is missed.

        Only the confirmation says so (``subscribe`` sends without waiting): a
        message published before Redis ran the SUBSCRIBE never comes. Its first
        channel's confirmation is enough, as Redis subscribes to all of one
        command's channels in one step. Couriers then look for what was published
        while no subscription stood.
        """
        self.subscribed.set()
        for queue in self._wake.values():
            self._on_ready(queue)  # anything published while we were away

    def _dispatch(self, channel: str, data: str) -> bool:
        """Hand one message to the worker; ``True`` when it woke a queue's courier."""
        queue = self._wake.get(channel)
        if queue is not None:
            self._on_ready(queue)
            return True
        if channel in self._cancel:
            run_id, _, fence = data.partition(" ")
            if fence.isdigit():
                self._on_cancel(run_id, int(fence))
        return False
