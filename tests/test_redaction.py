"""Messages show where a URL points, never what opens it."""

from __future__ import annotations

import pytest

from app.redaction import redacted


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("rediss://user:pw@cache:6380/1", "rediss://user:***@cache:6380/1"),
        ("redis://pw@h:1/0", "redis://***@h:1/0"),  # redis-py reads it as a user: mask anyway
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        (
            "redis+sentinel://:dp@s1:1,s2:2/m/3?sentinel_password=sp&ssl_cert_reqs=none",
            "redis+sentinel://:***@s1:1,s2:2/m/3?sentinel_password=***&ssl_cert_reqs=none",
        ),
        ("unix:///tmp/r.sock?db=0&password=pw", "unix:///tmp/r.sock?db=0&password=***"),
        ("redis://:p@ss/w?rd@h:1/0", "redis://:***@h:1/0"),  # raw @ / ? inside the password
        ("redis://:пароль@h:1/0", "redis://:***@h:1/0"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("https://u:pw@api.example.com/x", "https://u:***@api.example.com/x"),
        ("", ""),
        ("not a url, with pw@in it", "not a url, with pw@in it"),
    ],
)
def test_a_url_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_a_huge_url_is_redacted_in_linear_time() -> None:
    url = "redis://:" + "@" * 200_000 + "h:1/0?" + "&password=x" * 20_000
    assert redacted(url).startswith("redis://:***@h:1/0?")
    assert "x" not in redacted(url).replace("***", "")
