"""Every manifest that runs the API on a non-loopback address names its trusted hosts.

The image binds the API to 0.0.0.0, and such an API refuses to start without
LEASEHOLD_TRUSTED_HOSTS (``app.api.hosts``): a manifest that forgot it would
deploy an API that exits 2.
"""

from __future__ import annotations

from typing import Any

from app.api.hosts import trusted_hosts
from app.settings import ENV_PREFIX, load_settings
from tests.deploy.test_manifests import (
    COMPOSE,
    K8S,
    _literal,
    dockerfile_env,
    load_documents,
    load_yaml,
)
from tests.support.processes import REPO_ROOT


def api_settings(env: dict[str, Any]) -> dict[str, str]:
    merged = {**dockerfile_env(), **{name: str(value) for name, value in env.items()}}
    return {
        name.removeprefix(ENV_PREFIX).lower(): _literal(value)
        for name, value in merged.items()
        if name in (f"{ENV_PREFIX}API_HOST", f"{ENV_PREFIX}TRUSTED_HOSTS")
    }


def test_the_compose_api_starts_and_names_its_hosts() -> None:
    env = load_yaml(COMPOSE)["services"]["api"]["environment"]
    hosts = trusted_hosts(load_settings(**api_settings(env)))
    assert "api" in hosts


def test_the_public_compose_override_requires_trusted_hosts() -> None:
    # read as text: its `!override` tag is compose's, not YAML's
    override = (REPO_ROOT / "deploy" / "compose.public.yml").read_text()
    assert "LEASEHOLD_TRUSTED_HOSTS: ${LEASEHOLD_TRUSTED_HOSTS:?" in override


def test_the_k8s_api_starts_and_names_its_service() -> None:
    config = next(
        doc for doc in load_documents(K8S / "configmap.yaml") if doc["kind"] == "ConfigMap"
    )
    hosts = trusted_hosts(load_settings(**api_settings(config["data"])))
    assert "leasehold-api" in hosts
