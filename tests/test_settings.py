"""Settings: what a user writes in the environment or .env, and what they are told when wrong.

``.env.example`` is checked against the Settings model here, so a setting added
to ``app/settings/`` without a documented default fails the suite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.errors import ConfigurationError
from app.settings import ENV_PREFIX, Settings, load_settings
from app.settings.leases import LeaseSettings
from app.stack.embedded import free_port
from tests.support.processes import NO_ENV_FILE, PROBE_TIMEOUT_S, REPO_ROOT, env_without_settings

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
    """No LEASEHOLD_* setting from the caller's shell leaks into a test, nor a .env file."""
    for name in FIELD_ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in NO_ENV_FILE.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


@pytest.fixture
def dotenv_dir(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty working directory, whose ``.env`` is read (as outside the test session)."""
    clean_env.chdir(tmp_path)
    for name in NO_ENV_FILE:
        clean_env.delenv(name)
    return tmp_path


def test_env_example_lists_exactly_the_settings_fields() -> None:
    names = [name for _, name, _, _ in env_example_entries()]
    duplicates = {name for name in names if names.count(name) > 1}
    assert not duplicates, f".env.example lists these more than once: {sorted(duplicates)}"
    missing = FIELD_ENV_NAMES - set(names)
    unknown = set(names) - FIELD_ENV_NAMES
    assert not missing, f"settings missing from .env.example: {sorted(missing)}"
    assert not unknown, f".env.example lists variables Settings does not have: {sorted(unknown)}"


def test_env_example_copied_to_dotenv_gives_the_real_defaults(dotenv_dir: Path) -> None:
    # `cp .env.example .env` is where a user starts: it must change nothing
    shutil.copy(ENV_EXAMPLE, dotenv_dir / ".env")
    entries = env_example_entries()
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


def test_a_group_is_read_on_its_own_with_its_rules(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LEASEHOLD_LEASE_TTL_S", "2")
    assert LeaseSettings().renew_interval_s == pytest.approx(2 / 3)
    assert (
        "lease_ttl_s" in Settings.model_fields and "concurrency" not in LeaseSettings.model_fields
    )
    clean_env.setenv("LEASEHOLD_LEASE_SAFETY_MARGIN_S", "2")
    with pytest.raises(ValueError, match="LEASE_SAFETY_MARGIN_S must be shorter"):
        LeaseSettings()


def test_an_invalid_secret_is_named_but_never_echoed(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="LEASEHOLD_API_KEY:") as raised:
        load_settings(api_key=1234567890)
    assert "1234567890" not in str(raised.value)


def test_a_dict_setting_given_and_in_the_environment_is_merged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEASEHOLD_OP_LEASE_S__TOOL_CALL", "5")
    monkeypatch.setenv("LEASEHOLD_CONCURRENCY", "3")
    settings = Settings(op_lease_s={"model_call": 30}, concurrency=9)
    assert settings.op_lease_s == {"model_call": 30.0, "tool_call": 5.0}
    assert settings.concurrency == 9


def test_a_dict_setting_that_is_not_json_is_one_line_naming_the_variable(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("LEASEHOLD_OP_IDLE_S", "{model_call: 1}")
    with pytest.raises(ConfigurationError) as raised:
        load_settings()
    assert str(raised.value).startswith("invalid setting LEASEHOLD_OP_IDLE_S: not JSON (")
    assert "\n" not in str(raised.value)


def test_a_dotenv_file_in_the_working_directory_is_read_under_the_environment(
    dotenv_dir: Path, clean_env: pytest.MonkeyPatch
) -> None:
    (dotenv_dir / ".env").write_text(
        "# a comment\n"
        "LEASEHOLD_CONCURRENCY=3\n"
        "export LEASEHOLD_QUEUES='mail, jobs'\n"
        "LEASEHOLD_OP_LEASE_S__MODEL_CALL=30\n"
        "LEASEHOLD_ENV_FILE=elsewhere.env\n"  # only the environment names the file
        "LEASEHOLD_LEASE_TTL_S=5\n"
    )
    clean_env.setenv("LEASEHOLD_LEASE_TTL_S", "2")
    settings = load_settings(concurrency=9)
    assert settings.queues == ["mail", "jobs"]
    assert settings.op_lease_s == {"model_call": 30.0}
    assert settings.env_file == ".env"
    assert settings.lease_ttl_s == 2.0  # the environment wins over the file
    assert settings.concurrency == 9  # and a flag over both


def test_env_file_names_the_file_read_and_empty_reads_none(
    dotenv_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (dotenv_dir / ".env").write_text("LEASEHOLD_CONCURRENCY=3\n")
    (dotenv_dir / "staging.env").write_text("LEASEHOLD_CONCURRENCY=5\n")
    monkeypatch.setenv("LEASEHOLD_ENV_FILE", "staging.env")
    assert load_settings().concurrency == 5
    monkeypatch.setenv("LEASEHOLD_ENV_FILE", "")
    assert load_settings().concurrency == 16
    assert load_settings(env_file=".env").concurrency == 3


def test_a_named_env_file_that_does_not_exist_is_refused(
    dotenv_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_settings()  # no .env: the default file is optional
    monkeypatch.setenv("LEASEHOLD_ENV_FILE", "staging.env")
    with pytest.raises(ConfigurationError, match="LEASEHOLD_ENV_FILE: no such file"):
        load_settings()


def test_an_invalid_value_in_the_dotenv_file_names_its_variable(dotenv_dir: Path) -> None:
    (dotenv_dir / ".env").write_text("LEASEHOLD_LEASE_TTL_S=-1\n")
    with pytest.raises(ConfigurationError, match=r"LEASEHOLD_LEASE_TTL_S: .*got '-1'"):
        load_settings()


def test_leasehold_reads_the_dotenv_file_of_its_working_directory_under_the_environment(
    tmp_path: Path,
) -> None:
    in_file, in_env = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    (tmp_path / ".env").write_text(f"LEASEHOLD_API_URL={in_file}\n")
    env = env_without_settings()
    del env["LEASEHOLD_ENV_FILE"]  # as a user runs it: the default .env

    def unreachable_api(**extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "app.cli.launch", "runs", "get", "default.X"],
            env={**env, **extra},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
        assert done.returncode == 1, done.stderr
        return done.stderr

    assert f"cannot reach the API at {in_file} " in unreachable_api()
    assert f"cannot reach the API at {in_env} " in unreachable_api(LEASEHOLD_API_URL=in_env)
