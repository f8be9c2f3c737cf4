"""The README and deploy/README tell one story about running the compose stack.

A new user followed both and hit contradictions: `--scale worker=3` beside
`deploy.replicas: 3`, `docker compose kill` (a service name: every replica) to
kill the one worker that owns a run, and an owner id whose host part `docker
compose ps` does not show. These checks hold the docs to the compose file.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = {name: (ROOT / name).read_text() for name in ("README.md", "deploy/README.md")}


def test_the_worker_count_the_docs_name_is_the_compose_files() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    replicas = compose["services"]["worker"]["deploy"]["replicas"]
    deploy_readme = DOCS["deploy/README.md"]
    assert f"{replicas} workers" in deploy_readme
    assert f"deploy.replicas: {replicas}" in deploy_readme
    assert "--scale worker=" in deploy_readme, "how to change the count is said where it is set"


def test_no_doc_kills_one_worker_with_a_service_name() -> None:
    for name, text in DOCS.items():
        for line in text.splitlines():
            if re.search(r"docker compose kill\b", line):
                assert "service" in line or "every replica" in line or "Not" in line, (name, line)
    assert "docker kill" in DOCS["README.md"] and "docker kill" in DOCS["deploy/README.md"]


def test_the_docs_say_how_an_owner_id_names_its_container() -> None:
    for name, text in DOCS.items():
        assert "w-<host>-<pid>-<random>" in text, name
        assert re.search(r"short\s+id", text), name
