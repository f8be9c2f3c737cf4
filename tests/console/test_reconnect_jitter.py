"""The console's stream reconnects jitter (app/console/assets/api.js), like every other client.

An API restart cuts off every open console at once; with a fixed ``retry:``
wait they would all come back in the same instant. The delay function is run
by node, as the browser would run it (the module touches no browser global on
import).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

API_JS = Path(__file__).parents[2] / "app" / "console" / "assets" / "api.js"
NODE = shutil.which("node")
SAMPLES = 500

pytestmark = pytest.mark.skipif(NODE is None, reason="needs node to run the console's module")


def delays(script: str) -> object:
    """Run ``script`` (with ``reconnectDelayMs`` imported) under node; returns what it prints."""
    assert NODE is not None
    source = f"import {{ reconnectDelayMs }} from {json.dumps(API_JS.as_uri())};\n{script}"
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", source],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_each_wait_is_drawn_below_a_ceiling_that_doubles_from_the_hint_up_to_30_s() -> None:
    ceilings = delays(
        "console.log(JSON.stringify([1, 2, 3, 4, 5, 6, 1e6].map("
        "(n) => reconnectDelayMs(2000, n, () => 1))))"
    )
    assert ceilings == [2000, 4000, 8000, 16000, 30000, 30000, 30000]


def test_two_consoles_cut_off_together_wait_different_times() -> None:
    drawn = delays(
        f"console.log(JSON.stringify(Array.from({{length: {SAMPLES}}}, "
        "() => reconnectDelayMs(2000, 1))))"
    )
    assert isinstance(drawn, list) and len(drawn) == SAMPLES
    assert all(0 <= delay <= 2000 for delay in drawn)
    assert len(set(drawn)) > SAMPLES * 0.9  # not one instant
    assert min(drawn) < 200 and max(drawn) > 1800  # spread over the whole window
