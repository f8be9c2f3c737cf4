"""deploy/ checked by the real tools, not only by our own YAML reading.

``kubectl kustomize`` renders deploy/k8s exactly as ``kubectl apply -k`` would,
``kubernetes-validate --strict`` holds every rendered object to the Kubernetes
schemas it ships (no network: CI works offline), and hadolint lints the
Dockerfile. Each tool is also shown a broken input, so a tool that silently
checks nothing would fail here instead of passing everything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.files import DOCKERFILE, K8S, render_kustomization, run_tool, tool

# the oldest Kubernetes the manifests promise to work on, and the newest schemas shipped
OLDEST_KUBERNETES = "1.29.0"


def validate(manifest_yaml: str, path: Path, version: str | None = None) -> tuple[int, str]:
    """kubernetes-validate's exit status and findings for these objects."""
    path.write_text(manifest_yaml)
    versions = ["--kubernetes-version", version] if version else []
    result = run_tool(tool("kubernetes-validate"), "--strict", "--quiet", *versions, str(path))
    return result.returncode, result.stdout + result.stderr


def test_kustomize_renders_every_object_of_the_kustomization() -> None:
    objects = [doc for doc in yaml.safe_load_all(render_kustomization()) if doc]
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in objects}
    assert {
        ("Deployment", "leasehold-api"),
        ("Deployment", "leasehold-worker"),
        ("StatefulSet", "redis"),
        ("NetworkPolicy", "redis"),
        ("Secret", "redis-auth"),
    } <= kinds
    assert any(
        kind == "ConfigMap" and name.startswith("leasehold-redis-config-") for kind, name in kinds
    )


@pytest.mark.parametrize("version", [OLDEST_KUBERNETES, None], ids=["oldest", "newest"])
def test_rendered_kustomization_passes_the_kubernetes_schemas(
    tmp_path: Path, version: str | None
) -> None:
    returncode, output = validate(render_kustomization(), tmp_path / "rendered.yaml", version)
    assert (returncode, output) == (0, "")


def test_the_schema_check_rejects_an_unknown_field_and_a_wrong_type(tmp_path: Path) -> None:
    """The validator really checks: the same objects with two mistakes fail it."""
    objects = [doc for doc in yaml.safe_load_all(render_kustomization()) if doc]
    for doc in objects:
        if doc["kind"] == "Deployment":
            doc["spec"]["replicas"] = "three"
        if doc["kind"] == "NetworkPolicy":
            doc["spec"]["ingres"] = doc["spec"].pop("ingress")
    returncode, output = validate(yaml.safe_dump_all(objects), tmp_path / "broken.yaml")
    assert returncode != 0
    assert "replicas" in output
    assert "ingres" in output


def test_every_kustomization_file_renders_alone_or_through_the_kustomization() -> None:
    """No stray manifest: each YAML file in deploy/k8s is the kustomization or listed in it."""
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    files = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert files == listed


def test_the_dockerfile_passes_hadolint() -> None:
    result = run_tool(tool("hadolint"), "--no-color", str(DOCKERFILE))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_the_example_image_for_your_handlers_passes_hadolint() -> None:
    example = DOCKERFILE.parent / "examples" / "handlers" / "Dockerfile"
    result = run_tool(tool("hadolint"), "--no-color", str(example))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_the_example_handler_package_is_what_its_dockerfile_names() -> None:
    """The example's LEASEHOLD_HANDLERS imports from the folder it copies, and registers."""
    folder = DOCKERFILE.parent / "examples" / "handlers"
    env_line = next(
        line
        for line in (folder / "Dockerfile").read_text().splitlines()
        if "LEASEHOLD_HANDLERS=" in line
    )
    module = env_line.split("LEASEHOLD_HANDLERS=", 1)[1].strip()
    code = f"import {module}; from app.handlers import default_registry as r; print(len(r))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, "1"), done.stderr


def test_hadolint_flags_an_unpinned_base_and_a_root_shell_form_entrypoint() -> None:
    """The linter really lints: a careless Dockerfile fed on stdin gets findings."""
    careless = "FROM python:latest\nRUN pip install leasehold\nENTRYPOINT leasehold\n"
    result = run_tool(tool("hadolint"), "--no-color", "-", stdin=careless)
    assert result.returncode != 0
    for rule in ("DL3007", "DL3013", "DL3025"):
        assert rule in result.stdout, result.stdout
