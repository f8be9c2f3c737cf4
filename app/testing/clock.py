"""The test kit's virtual clock: the real scripts, reading ``TIME`` plus an offset.

Every script reads the time in one place, ``now_ms()`` in ``includes/args.lua``
(DESIGN §1 rule 5: one clock, the Redis server's). The kit loads the same scripts with
that one function changed to add the integer at
:attr:`~app.store.keys.GlobalKeys.test_clock` (ms; absent: 0), and advancing the clock
is one ``INCRBY`` of it. So every decision that reads the Redis clock — a sleep's end,
a signal's or join's timeout, a delayed start, a retry's backoff, a lease's expiry, a
schedule's fire time — sees the moved time together, and nothing is rewritten: no due
time is edited, no record is touched. A deployment never loads these scripts (the
offset key is read by nothing else).

What it does not move: time measured in the worker's process while a handler runs
(an operation's ``first_progress_s`` / ``idle_s`` / ``max_duration_s``, heartbeats)
is real, as it must be for a lease to stay honest; so the kit only advances while no
run is running (:meth:`~app.testing.stack.TestStack.advance` waits for that first), as
Temporal's time-skipping test server skips only while no activity runs. Redis's own key
expiry (retention) follows the real clock.
"""

from __future__ import annotations

import hashlib

from app.store.lua.scripts import Script, Scripts, load_scripts

# the line of includes/args.lua's now_ms() that the kit's scripts change
NOW_LINE = "return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)"


def virtual_clock_scripts(clock_key: str) -> Scripts:
    """Every transition, its ``now_ms()`` adding the offset stored at ``clock_key``.

    Raises ``RuntimeError`` if a script reads ``TIME`` some other way: then the clock
    could not move it, and a kit that silently half-moved time would lie.
    """
    offset = f"{NOW_LINE} + (tonumber(redis.call('GET', '{clock_key}')) or 0)"
    moved: dict[str, Script] = {}
    for name, script in load_scripts().items():
        if script.source.count("redis.call('TIME')") != script.source.count(NOW_LINE):
            raise RuntimeError(f"{name} reads TIME outside now_ms(): the virtual clock cannot")
        source = script.source.replace(NOW_LINE, offset)
        legacy = script.legacy_source.replace(NOW_LINE, offset)
        moved[name] = Script(name, script.numkeys, source, _sha1(source), legacy, _sha1(legacy))
    return Scripts(moved)


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()
