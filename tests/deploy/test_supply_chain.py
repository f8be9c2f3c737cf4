"""Supply chain: the image installs hashed, pinned dependencies onto digest-pinned bases.

deploy/requirements.lock (``make lock``) must pin every runtime dependency of
pyproject.toml, at a version pyproject allows, with a sha256 for every line;
the Dockerfile must install it with ``--require-hashes``; every base image in
deploy/ and docker-compose.yml must be pinned by digest; and pyproject's lower
bounds must sit at or above the releases that fixed known advisories.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.files import BUILD_LOCK, COMPOSE, K8S, LOCK, load_compose
from tests.deploy.test_manifests import dockerfile_stages
from tests.support.processes import REPO_ROOT

DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)")
# the image we build ourselves: its digest exists only once you push it
OWN_IMAGE = "leasehold"
# (package, first release without the advisory, what it fixed)
FIXED_RELEASES = [
    ("starlette", "0.49.1", "CVE-2025-62727: Range header DoS in FileResponse"),
    ("starlette", "0.47.2", "CVE-2025-54121: multipart parsing blocks the event loop"),
    ("h11", "0.16.0", "CVE-2025-43859: request smuggling via malformed chunked bodies"),
]


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def runtime_requirements() -> list[Requirement]:
    """pyproject's runtime dependencies that apply in the image (Linux, CPython 3.11)."""
    environment = {**default_environment(), "sys_platform": "linux", "python_version": "3.11"}
    environment["platform_python_implementation"] = "CPython"
    requirements = [Requirement(line) for line in pyproject()["project"]["dependencies"]]
    return [r for r in requirements if r.marker is None or r.marker.evaluate(environment)]


def build_requirements() -> list[Requirement]:
    """What building the wheel needs: pyproject's [build-system] requires."""
    return [Requirement(line) for line in pyproject()["build-system"]["requires"]]


def lock_entries(lock: Path = LOCK) -> dict[str, tuple[Version, list[str]]]:
    """``name -> (version, hashes)`` for every requirement of a lock file."""
    text = re.sub(r"\\\n", " ", lock.read_text())
    entries = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = PIN.match(line.strip())
        assert match, f"{lock.name}: not an exact pin: {line.strip()!r}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})\b", line)
        entries[canonicalize_name(match.group(1))] = (Version(match.group(2)), hashes)
    return entries


LOCKS = [(LOCK, runtime_requirements), (BUILD_LOCK, build_requirements)]
LOCK_IDS = ["runtime", "build"]


@pytest.mark.parametrize(("lock", "required"), LOCKS, ids=LOCK_IDS)
def test_the_lock_pins_every_dependency_at_an_allowed_version(
    lock: Path, required: Callable[[], list[Requirement]]
) -> None:
    entries = lock_entries(lock)
    problems = []
    for requirement in required():
        name = canonicalize_name(requirement.name)
        if name not in entries:
            problems.append(f"{name}: not in {lock.name} (run `make lock`)")
        elif not requirement.specifier.contains(entries[name][0], prereleases=True):
            problems.append(f"{name}=={entries[name][0]}: outside {requirement.specifier}")
    assert problems == []


@pytest.mark.parametrize(("lock", "required"), LOCKS, ids=LOCK_IDS)
def test_every_locked_requirement_carries_a_hash(
    lock: Path, required: Callable[[], list[Requirement]]
) -> None:
    entries = lock_entries(lock)
    assert len(entries) >= len(required())
    assert [name for name, (_, hashes) in entries.items() if not hashes] == []


def test_the_lock_parser_refuses_what_pip_would_not_check() -> None:
    """An unpinned line is a problem the lock test reports, not something it skips."""
    assert PIN.match("fastapi>=0.120") is None
    assert PIN.match("fastapi==0.120.1 \\") is not None


def test_the_image_installs_the_lock_with_hashes_and_nothing_unpinned() -> None:
    build = " ".join(dockerfile_stages()[0])
    assert "COPY deploy/requirements.lock deploy/build-requirements.lock ./" in build
    assert "pip install --require-hashes --no-deps -r build-requirements.lock" in build
    assert "pip wheel --no-build-isolation --no-deps" in build
    assert "pip install --require-hashes --no-deps -r requirements.lock" in build
    assert "pip install --no-deps /wheels/leasehold-" in build
    installs = re.findall(r"pip install [^&]*", build)
    assert all("--no-deps" in install for install in installs), installs


def test_every_base_image_is_pinned_by_digest() -> None:
    images = [line.split()[1] for stage in dockerfile_stages() for line in stage[:1]]
    for service in load_compose(COMPOSE)["services"].values():
        if "build" not in service:
            images.append(service["image"])
    for path in K8S.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
            images += [c["image"] for c in spec.get("containers", []) if c["image"] != OWN_IMAGE]
    assert len(images) >= 4
    assert [image for image in images if not DIGEST.search(image)] == []


def test_both_dockerfile_stages_start_from_the_same_base() -> None:
    bases = {stage[0].split()[1] for stage in dockerfile_stages()}
    assert len(bases) == 1, bases


@pytest.mark.parametrize(("package", "fixed", "advisory"), FIXED_RELEASES)
def test_lower_bounds_exclude_releases_with_known_advisories(
    package: str, fixed: str, advisory: str
) -> None:
    """A fresh `pip install leasehold` can never resolve to a release with the advisory."""
    requirements = {canonicalize_name(r.name): r for r in runtime_requirements()}
    assert package in requirements, f"{package} has no lower bound in pyproject ({advisory})"
    requirement = requirements[package]
    bounds = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
    assert bounds and min(bounds) >= Version(fixed), f"{requirement}: {advisory}"
    assert lock_entries()[package][0] >= Version(fixed), advisory
