"""The README's Python client example runs as written against a real API and worker."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.processes import REPO_ROOT, Processes, env_without_settings

README_URL = "http://127.0.0.1:8000"


def client_example() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("### Python client", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's Python client section has no example"
    return match.group(1)


def test_the_readme_client_example_creates_follows_with_resume_and_cancels(
    processes: Processes,
) -> None:
    _, url = processes.api()
    processes.worker()
    code = client_example()
    assert README_URL in code
    done = subprocess.run(
        [sys.executable, "-c", code.replace(README_URL, url)],
        cwd=REPO_ROOT,
        env=env_without_settings(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    types = [line.split(" ", 1)[0] for line in lines[:-2]]
    # every event once: the resumed follow starts after the last one handled
    assert types[0] == "created" and "claimed" in types and types[-1] == "succeeded"
    assert types.count("claimed") == 1 and types.count("created") == 1
    assert lines[-2] == "succeeded"
    assert lines[-1] in ("cancelled", "cancelling")
