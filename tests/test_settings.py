"""Settings: what a user writes in the environment, and what they are told when it is wrong.

``.env.example`` is checked against the Settings model here, so a setting added
to ``app/settings.py`` without a documented default fails the suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.errors import ConfigurationError
from app.settings import ENV_PREFIX, Settings, load_settings
from tests.support.processes import REPO_ROOT

ENV_EXAMPLE = REPO_ROOT / ".env.example"
# `LEASEHOLD_NAME=value` is set by default; `# LEASEHOLD_NAME=example` is unset by default
ASSIGNMENT = re.compile(rf"^(?P<unset>#\s*)?(?P<name>{ENV_PREFIX}[A-Z0-9_]+)=(?P<value>.*)$")
FIELD_ENV_NAMES = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}


def env_example_entries() -> list[tuple[int, str, str, bool]]:
    """(line number, variable, value, set by default) for every entry of .env.example."""
    entries = []
    for number, line in enumerate(ENV_EXAMPLE.read_text().splitlines(), start=1):
        match = ASSIGNMENT.match(line.strip())
        if match:
            entries.append((number, match["name"], match["value"], not match["unset"]))
    return entries


def field_default(env_name: str) -> object:
    field = Settings.model_fields[env_name.removeprefix(ENV_PREFIX).lower()]
    return field.get_default(call_default_factory=True)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No LEASEHOLD_* setting from the caller's shell leaks into a test."""
    for name in FIELD_ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_env_example_lists_exactly_the_settings_fields() -> None:
    names = [name for _, name, _, _ in env_example_entries()]
    duplicates = {name for name in names if names.count(name) > 1}
    assert not duplicates, f".env.example lists these more than once: {sorted(duplicates)}"
    missing = FIELD_ENV_NAMES - set(names)
    unknown = set(names) - FIELD_ENV_NAMES
    assert not missing, f"settings missing from .env.example: {sorted(missing)}"
    assert not unknown, f".env.example lists variables Settings does not have: {sorted(unknown)}"


def test_env_example_values_set_by_default_are_the_real_defaults(
    clean_env: pytest.MonkeyPatch,
) -> None:
    entries = env_example_entries()
    for _, name, value, is_set in entries:
        if is_set:
            clean_env.setenv(name, value)
    loaded = load_settings()
    for number, name, _value, is_set in entries:
        field = name.removeprefix(ENV_PREFIX).lower()
        if is_set:
            assert getattr(loaded, field) == field_default(name), f".env.example:{number} {name}"
        else:
            assert field_default(name) in (None, [], {}), (
                f".env.example:{number} {name} has a default"
            )


def test_every_env_example_entry_has_a_comment_above_it() -> None:
    lines = ENV_EXAMPLE.read_text().splitlines()
    for number, name, _, _ in env_example_entries():
        above = lines[number - 2].strip()
        assert above.startswith("#") and not ASSIGNMENT.match(above), (
            f".env.example:{number} {name} needs a one-line comment above it"
        )


def test_every_setting_has_a_description() -> None:
    undocumented = [name for name, field in Settings.model_fields.items() if not field.description]
    assert not undocumented, f"Field(description=...) missing for {undocumented}"


def test_comma_separated_lists_are_split_and_trimmed(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LEASEHOLD_QUEUES", " default , mail,,")
    clean_env.setenv("LEASEHOLD_HANDLERS", "app.demo,tests.support.handlers")
    clean_env.setenv("LEASEHOLD_API_KEYS", "")
    settings = load_settings()
    assert settings.queues == ["default", "mail"]
    assert settings.handlers == ["app.demo", "tests.support.handlers"]
    assert settings.api_keys == []


def test_a_sub_second_lease_ttl_is_accepted_and_drives_the_intervals(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("LEASEHOLD_LEASE_TTL_S", "0.5")
    settings = load_settings()
    assert settings.lease_ttl_s == 0.5
    assert settings.lease_ttl_ms == 500
    assert settings.renew_interval_s == pytest.approx(0.5 / 3)
    assert settings.effective_reconcile_interval_s == pytest.approx(0.5 / 3)


def test_cli_flags_override_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LEASEHOLD_LEASE_TTL_S", "0.5")
    clean_env.setenv("LEASEHOLD_QUEUES", "mail")
    settings = load_settings(lease_ttl_s=2.0, queues=None)
    assert settings.lease_ttl_s == 2.0
    assert settings.queues == ["mail"]  # a flag left unset does not override


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LEASEHOLD_LEASE_TTL_S", "-1"),
        ("LEASEHOLD_LEASE_TTL_S", "0"),
        ("LEASEHOLD_LEASE_TTL_S", "thirty"),
        ("LEASEHOLD_CONCURRENCY", "0"),
        ("LEASEHOLD_QUEUES", "has space"),
        ("LEASEHOLD_QUEUES", ","),
        ("LEASEHOLD_PREFIX", "a:b"),
        ("LEASEHOLD_API_PORT", "70000"),
        ("LEASEHOLD_LOG_LEVEL", "chatty"),
        ("LEASEHOLD_DEFAULT_ON_LEASE_EXPIRED", "sometimes"),
        ("LEASEHOLD_RECONCILER_ENABLED", "maybe"),
        ("LEASEHOLD_RECONCILE_INTERVAL_S", ""),
        ("LEASEHOLD_RETENTION_FAILED_S", "inf"),
        ("LEASEHOLD_RETENTION_SUCCEEDED_S", "1e20"),  # past what Lua can PEXPIRE exactly
        ("LEASEHOLD_QUEUED_TTL_S", "0"),
        ("LEASEHOLD_RETENTION_MAX_S", "nan"),
        ("LEASEHOLD_PURGE_BATCH_MAX", "0"),
        ("LEASEHOLD_RETRY_BACKOFF_S", "nan"),  # a run retried after NaN seconds
        ("LEASEHOLD_RETRY_BACKOFF_MAX_S", "inf"),
        # the waits that bound streams and connections: an endless one is the hang itself
        ("LEASEHOLD_REDIS_POOL_TIMEOUT_S", "inf"),
        ("LEASEHOLD_REDIS_POOL_TIMEOUT_S", "3600"),  # a request queued an hour for a connection
        ("LEASEHOLD_API_HEADER_TIMEOUT_S", "inf"),  # half-sent headers held for ever
        ("LEASEHOLD_API_HEADER_TIMEOUT_S", "1e300"),
        ("LEASEHOLD_API_KEEP_ALIVE_S", "inf"),
        ("LEASEHOLD_SSE_SEND_TIMEOUT_S", "inf"),  # a follower that never reads is never dropped
        ("LEASEHOLD_SSE_KEEPALIVE_S", "inf"),
        ("LEASEHOLD_REDIS_REQUEST_TIMEOUT_S", "inf"),  # a silent Redis hangs every request
        ("LEASEHOLD_REDIS_REQUEST_TIMEOUT_S", "0"),
        # worker timings: "inf" is never, which none of them may mean
        ("LEASEHOLD_DRAIN_TIMEOUT_S", "inf"),  # a SIGTERM that never releases
        ("LEASEHOLD_RECONCILE_INTERVAL_S", "inf"),  # expired leases never reconciled
        ("LEASEHOLD_IDLE_WAKE_S", "nan"),
        ("LEASEHOLD_OP_DEFAULT_LEASE_S", "1e300"),
        ("LEASEHOLD_WATCHDOG_EVALUATOR_TIMEOUT_S", "inf"),  # a hung judge never means RENEW
        ("LEASEHOLD_WATCHDOG_SUSPICION_THRESHOLD", "inf"),
        ("LEASEHOLD_STEP_EXTENSION_RATIO", "nan"),
        ("LEASEHOLD_RETRY_BACKOFF_S", "1e300"),
        ("LEASEHOLD_RETRY_BACKOFF_MAX_S", "1e300"),
    ],
)
def test_an_invalid_value_raises_one_line_naming_the_variable(
    clean_env: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    clean_env.setenv(variable, value)
    with pytest.raises(ConfigurationError) as raised:
        load_settings()
    message = str(raised.value)
    assert variable in message
    assert "\n" not in message


def test_the_error_shows_the_value_that_was_given(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LEASEHOLD_CONCURRENCY", "lots")
    with pytest.raises(ConfigurationError, match=r"LEASEHOLD_CONCURRENCY: .*got 'lots'"):
        load_settings()


def test_a_safety_margin_not_shorter_than_the_ttl_names_both_variables(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("LEASEHOLD_LEASE_TTL_S", "1")
    clean_env.setenv("LEASEHOLD_LEASE_SAFETY_MARGIN_S", "1")
    with pytest.raises(ConfigurationError, match=r"LEASE_SAFETY_MARGIN_S .* LEASEHOLD_LEASE_TTL_S"):
        load_settings()


@pytest.mark.parametrize("command", [["worker"], ["api"], ["reconciler"], ["up"], ["runs", "list"]])
def test_a_command_with_an_invalid_setting_exits_2_with_one_line(
    command: list[str], redis_url: str, tmp_path: Path
) -> None:
    env = {key: value for key, value in os.environ.items() if key not in FIELD_ENV_NAMES}
    # should validation ever let it through, it must not reach anybody else's Redis
    env |= {"LEASEHOLD_REDIS_URL": redis_url, "LEASEHOLD_LEASE_TTL_S": "-1"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *command],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "LEASEHOLD_LEASE_TTL_S" in lines[0]
    assert list(tmp_path.iterdir()) == []  # `up` started nothing: no .leasehold/


def test_an_invalid_secret_is_named_but_never_echoed(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="LEASEHOLD_API_KEY:") as raised:
        load_settings(api_key=1234567890)
    assert "1234567890" not in str(raised.value)


# What pydantic-settings' EnvSettingsSource read for this class (prefix, any case, JSON for
# the dict settings, `__KEY` variables, comma lists as written); app.settings now reads the
# environment itself, and must read every one of these exactly as it did.
ENVIRONMENTS = [
    {},
    {"LEASEHOLD_QUEUES": "a, b,,c", "LEASEHOLD_LEASE_TTL_S": "0.5", "LEASEHOLD_UNKNOWN": "1"},
    {"leasehold_concurrency": "7", "LeaseHold_Handlers": "app.demo"},
    {"LEASEHOLD_CONCURRENCY": "", "LEASEHOLD_REDIS_URL": "redis://h:1/0"},
    {"LEASEHOLD_OP_LEASE_S": '{"model_call": 30}', "LEASEHOLD_OP_LEASE_S__TOOL_CALL": "5"},
    {"LEASEHOLD_OP_LEASE_S": '{"a": {"x": 1}}', "LEASEHOLD_OP_LEASE_S__A__Y": "2"},
    {"LEASEHOLD_OP_IDLE_S__Model_Call": "abc", "LEASEHOLD_OP_IDLE_S__B": ""},
    {"LEASEHOLD_OP_IDLE_S__A__B": "1", "LEASEHOLD_OP_IDLE_S__C": "[1]"},
    {"LEASEHOLD_OP_IDLE_S": "null", "LEASEHOLD_OP_MAX_DURATION_S": "[1, 2]"},
    {"LEASEHOLD_QUEUES__X": "1", "LEASEHOLD_API_KEYS": '["k"]'},
    {"LEASEHOLD_OP_IDLE_S": "not json"},
    {"LEASEHOLD_OP_FIRST_PROGRESS_S": ""},
]


def _read_both(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> list[object]:
    """What app.settings reads, beside what pydantic-settings' env source read (or raised)."""
    import pydantic_settings.sources.base as base
    from pydantic_settings import EnvSettingsSource

    import app.settings as settings

    # pydantic-settings knows its own NoDecode marker; app.settings has its own
    monkeypatch.setattr(base, "NoDecode", settings.NoDecode)
    for name in list(os.environ):
        if name.upper().startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reference = EnvSettingsSource(
        Settings,  # type: ignore[arg-type]
        case_sensitive=False,
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
    )
    answers: list[object] = []
    for read in (lambda: settings._from_environment(Settings.model_fields), reference):
        try:
            answers.append(read())
        except ValueError as exc:
            answers.append(("raised", str(exc)))
    return answers


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_environment_is_read_as_pydantic_settings_read_it(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    ours, theirs = _read_both(monkeypatch, env)
    assert ours == theirs


def test_a_dict_setting_given_and_in_the_environment_is_merged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEASEHOLD_OP_LEASE_S__TOOL_CALL", "5")
    monkeypatch.setenv("LEASEHOLD_CONCURRENCY", "3")
    settings = Settings(op_lease_s={"model_call": 30}, concurrency=9)
    assert settings.op_lease_s == {"model_call": 30.0, "tool_call": 5.0}
    assert settings.concurrency == 9


def test_a_dict_setting_that_is_not_json_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASEHOLD_OP_IDLE_S", "{model_call: 1}")
    with pytest.raises(ValueError, match='error parsing value for field "op_idle_s"'):
        Settings()
