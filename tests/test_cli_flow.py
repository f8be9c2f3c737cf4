"""`leasehold queues limits` and `leasehold runs priority` against a real API process."""

from __future__ import annotations

import json

from app.models import Run
from tests.test_cli import api_url, leasehold  # api_url is a fixture

__all__ = ["api_url"]


def test_queues_limits_sets_shows_and_refuses_a_malformed_pair(api_url: str) -> None:
    done = leasehold(
        "queues", "limits", "default", "--queue", "4", "--handler", "demo.echo=2",
        "--default-key", "1", "--key", "tenant:vip=3", "--json", api_url=api_url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = leasehold("queues", "limits", "default", "--show", "--json", api_url=api_url)
    assert json.loads(shown.stdout) == {
        "queue": 4,
        "handlers": {"demo.echo": 2},
        "default_key": 1,
        "keys": {"tenant:vip": 3},
    }
    bad = leasehold("queues", "limits", "default", "--key", "nolimit", api_url=api_url)
    assert bad.returncode == 2 and "--key takes NAME=N" in bad.stderr
    unchanged = leasehold("queues", "limits", "default", "--show", "--json", api_url=api_url)
    assert json.loads(unchanged.stdout)["queue"] == 4
    read = leasehold("queues", "limits", "default", "--show", api_url=api_url)
    assert read.stdout == ("default: queue 4, handler demo.echo 2, any key 1, key tenant:vip 3\n")


def test_runs_priority_changes_a_queued_run(api_url: str) -> None:
    queued = Run.model_validate_json(
        leasehold("submit", "demo.sleep", "--json", api_url=api_url).stdout
    )
    done = leasehold("runs", "priority", queued.id, "7", api_url=api_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{queued.id}: priority 7"
    refused = leasehold("runs", "priority", queued.id, "1000", api_url=api_url)
    assert refused.returncode != 0
