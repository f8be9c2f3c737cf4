"""The CLI client's settings without the model (app.environment): the model's, or none."""

from __future__ import annotations

import os

import pytest

from app import environment
from app.settings import Settings, load_settings

CLIENT_ENVIRONMENTS = [
    {},
    {"LEASEHOLD_API_URL": "http://api.example:9000/"},
    {"leasehold_api_url": "http://h:1", "LEASEHOLD_API_KEY": "k" * 20},
    {"LEASEHOLD_API_URL": "", "LEASEHOLD_API_KEY": ""},
    {"Leasehold_Api_Key": "x y", "PATH_ELSEWHERE": "1", "COLUMNS": "80"},
]


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No LEASEHOLD_* variable of the test session's own."""
    for variable in list(os.environ):
        if variable.lower().startswith(environment.PREFIX):
            monkeypatch.delenv(variable)
    return monkeypatch


@pytest.mark.parametrize("env", CLIENT_ENVIRONMENTS)
def test_with_only_the_clients_variables_it_reads_what_the_model_reads(
    env: dict[str, str], clean: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        clean.setenv(name, value)
    settings = load_settings()
    assert environment.client_settings() == (settings.client_api_url, settings.api_key)


@pytest.mark.parametrize(
    "env",
    [
        {"LEASEHOLD_LOG_LEVEL": "INFO"},
        {"LEASEHOLD_LOG_LEVEL": "bogus"},
        {"LEASEHOLD_API_URL__X": "1"},
        {"leasehold_api_port": "9"},
    ],
)
def test_any_other_setting_is_left_to_the_model(
    env: dict[str, str], clean: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        clean.setenv(name, value)
    assert environment.client_settings() is None


def test_the_defaults_are_the_models() -> None:
    fields = Settings.model_fields
    assert fields["api_host"].default == environment.DEFAULT_API_HOST
    assert fields["api_port"].default == environment.DEFAULT_API_PORT
