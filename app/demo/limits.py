"""Bounds of the demo's fake model, shared by the route that serves it and ``demo.agent``.

The demo is for watching the system on one machine; none of its knobs may let a
caller hold a connection, a worker's loop or a slot for long. ``demo.agent``
validates its input against the same numbers the route enforces, so a run the
API accepted never fails on a 422 from the model.
"""

from __future__ import annotations

# the whole answer of /demo/model ends after this, a stall included
MAX_STREAM_S = 120.0
MAX_FIRST_TOKEN_S = 60.0
MAX_GAP_S = 10.0
MAX_TOKENS = 100_000
# demo.cpu holds the worker's event loop (and the GIL): a few seconds show the point
MAX_CPU_S = 10.0
# a fake tool call only sleeps, but holds one of the worker's slots
MAX_TOOL_LATENCY_S = 3600.0
MAX_TOOLS_PER_STEP = 16
