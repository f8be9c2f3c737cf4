"""``leasehold keys ...`` as a user runs it, against a real API with a bootstrap key."""

from __future__ import annotations

import pytest

from app.models.keys import KeyPage, KeySecret
from tests.support.processes import Processes
from tests.test_cli import leasehold, one_error_line

BOOTSTRAP = "k-bootstrap-0123456789abcdef"


@pytest.fixture
def keyed_url(processes: Processes) -> str:
    _, url = processes.api(LEASEHOLD_API_KEYS=BOOTSTRAP)
    return url


def as_admin(*args: str, url: str, key: str = BOOTSTRAP) -> list[str]:
    return [*args, "--api-key", key]


def test_create_list_rotate_and_revoke_a_key(keyed_url: str) -> None:
    made = leasehold(
        *as_admin("keys", "create", "ci-bot", "--role", "submit", "--json", url=keyed_url),
        api_url=keyed_url,
    )
    assert made.returncode == 0, made.stderr
    key = KeySecret.model_validate_json(made.stdout)
    assert key.role == "submit"
    listed = leasehold(*as_admin("keys", "list", url=keyed_url), api_url=keyed_url)
    assert key.id in listed.stdout and "ci-bot" in listed.stdout
    assert key.secret not in listed.stdout
    page = KeyPage.model_validate_json(
        leasehold(*as_admin("keys", "list", "--json", url=keyed_url), api_url=keyed_url).stdout
    )
    assert [item.id for item in page.items] == [key.id]
    # the new key may submit but not manage keys: one line naming the role
    refused = leasehold(*as_admin("keys", "list", url=keyed_url, key=key.secret), api_url=keyed_url)
    assert refused.returncode == 1
    assert "'admin'" in one_error_line(refused)
    rotated = leasehold(*as_admin("keys", "rotate", key.id, url=keyed_url), api_url=keyed_url)
    assert rotated.returncode == 0, rotated.stderr
    new_secret = rotated.stdout.strip().splitlines()[-1]
    assert new_secret.startswith("lh_") and new_secret != key.secret
    revoked = leasehold(*as_admin("keys", "revoke", key.id, url=keyed_url), api_url=keyed_url)
    assert revoked.stdout.strip() == f"revoked {key.id}"
    again = leasehold(*as_admin("keys", "revoke", key.id, url=keyed_url), api_url=keyed_url)
    assert again.returncode == 1 and "no key" in one_error_line(again)


def test_an_unknown_role_is_one_error_line(keyed_url: str) -> None:
    done = leasehold(
        *as_admin("keys", "create", "x", "--role", "root", url=keyed_url), api_url=keyed_url
    )
    assert done.returncode == 1
    assert "role" in one_error_line(done)
