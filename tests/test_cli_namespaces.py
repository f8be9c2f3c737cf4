"""``leasehold namespaces ...`` as a user runs it, against a real API with a bootstrap key."""

from __future__ import annotations

import pytest

from app.models.namespaces import Namespace, NamespacePage
from tests.support.processes import Processes
from tests.test_cli import leasehold, one_error_line

BOOTSTRAP = "k-bootstrap-0123456789abcdef"


@pytest.fixture
def keyed_url(processes: Processes) -> str:
    _, url = processes.api(LEASEHOLD_API_KEYS=BOOTSTRAP)
    return url


def admin(*args: str) -> list[str]:
    return [*args, "--api-key", BOOTSTRAP]


def test_put_list_show_and_delete_a_namespace(keyed_url: str) -> None:
    made = leasehold(
        *admin("namespaces", "put", "acme", "--quota", "live_runs=3", "--quota", "queues=2"),
        api_url=keyed_url,
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "acme: live_runs=3, queues=2"
    page = NamespacePage.model_validate_json(
        leasehold(*admin("namespaces", "list", "--json"), api_url=keyed_url).stdout
    )
    assert [item.name for item in page.items] == ["default", "acme"]
    shown = Namespace.model_validate_json(
        leasehold(*admin("namespaces", "show", "acme", "--json"), api_url=keyed_url).stdout
    )
    assert shown.usage is not None and shown.usage.live_runs == 0
    gone = leasehold(*admin("namespaces", "delete", "acme"), api_url=keyed_url)
    assert gone.stdout.strip() == "deleted acme"
    again = leasehold(*admin("namespaces", "show", "acme"), api_url=keyed_url)
    assert again.returncode == 1 and "acme" in one_error_line(again)


@pytest.mark.parametrize("pair", ["live_runs", "live_runs=many", "live_runs=-1", "=3"])
def test_a_malformed_quota_is_one_error_line_and_nothing_is_declared(
    keyed_url: str, pair: str
) -> None:
    done = leasehold(*admin("namespaces", "put", "acme", "--quota", pair), api_url=keyed_url)
    assert done.returncode == 1
    assert "quota" in one_error_line(done)
    listed = leasehold(*admin("namespaces", "list"), api_url=keyed_url)
    assert "acme" not in listed.stdout
