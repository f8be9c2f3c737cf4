"""What reading a script's arguments by name costs Redis, each way issue 34 item 2 names.

A transition reads one record of arguments. Three ways to read it by field name:

* **spliced**: the field names are made ARGV positions when the script is spliced
  (``ARGV[@owner_id]`` -> ``ARGV[1]``, what Leasehold does): Redis runs positional code;
* **cjson map**: one JSON object argument, ``cjson.decode`` d at each call;
* **cmsgpack map**: one MessagePack map argument, ``cmsgpack.unpack`` ed at each call.

Each script reads every field of a record shaped like ``CreateShape`` (19 fields, the
widest the create path sends) into a table and writes one of them (a SET), so the
difference is the read alone. Counted by callgrind (redis-server instructions per
call, the same for the same inputs whatever the machine's load) and by ``INFO
commandstats`` (usec per call, noisy). Run::

    .venv/bin/python -m bench.argv_records --calls 5000
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import redis

from app.store.runs.bindings import CreateShape
from bench.redis_cost import callgrind_total, profiled_server

FIELDS = CreateShape._fields
VALUES = [f"value-{i}-{'x' * 12}" for i in range(len(FIELDS))]

SPLICED = (
    "local s = {"
    + ", ".join(f"{field} = ARGV[{i + 1}]" for i, field in enumerate(FIELDS))
    + "}\nredis.call('SET', KEYS[1], s.handler)\nreturn 1"
)
DECODED = (
    "local a = {decode}(ARGV[1])\nlocal s = {{"
    + ", ".join(f"{field} = a.{field}" for field in FIELDS)
    + "}}\nredis.call('SET', KEYS[1], s.handler)\nreturn 1"
)
RECORD = json.dumps(dict(zip(FIELDS, VALUES, strict=True)))
# the MessagePack map is packed by Redis's own cmsgpack from the JSON (no Python packer)
PACK = "return cmsgpack.pack(cjson.decode(ARGV[1]))"
WAYS = {
    "spliced positions": (SPLICED, VALUES),
    "cjson map": (DECODED.format(decode="cjson.decode"), [RECORD]),
    "cmsgpack map": (DECODED.format(decode="cmsgpack.unpack"), None),
}


def measure(way: str, calls: int, profile: Path) -> dict[str, float]:
    """Instructions and usec per call of one way, on a redis-server of its own."""
    source, args = WAYS[way]
    with profiled_server(str(profile), []) as (url, instrument):
        client = redis.Redis.from_url(url)
        if args is None:
            args = [client.eval(PACK, 0, RECORD)]
        sha = client.script_load(source)
        client.evalsha(sha, 1, "k", *args)  # compiled and warm before counting
        client.config_resetstat()
        instrument(True)
        pipe = client.pipeline(transaction=False)
        for _ in range(calls):
            pipe.evalsha(sha, 1, "k", *args)
        pipe.execute()
        instrument(False)
        usec = client.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]
        client.close()
    return {"instructions_per_call": callgrind_total(str(profile)) / calls, "usec": usec}


def main() -> None:
    """Measure every way and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        for way in WAYS:
            result = measure(way, args.calls, Path(out) / f"{way.replace(' ', '-')}.cg")
            print(
                f"{way:18s} {result['instructions_per_call']:10.0f} instructions/call  "
                f"(usec/call under callgrind: {result['usec']:.1f})"
            )


if __name__ == "__main__":
    main()
