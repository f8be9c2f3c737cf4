"""A page on another origin cannot create or cancel runs, even with auth off.

A browser sends a cross-origin POST without asking first (no CORS preflight)
only when it is "simple": ``mode: 'no-cors'`` and a body labelled ``text/plain``
or as a form, or none. The API refuses every unsafe request whose ``Origin`` is
another site's (403, ``origins.py``), and would parse JSON only when labelled
``application/json`` anyway (415). A real Chromium loads an attacker's page
from another local port and makes exactly those requests.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import BrowserContext

from tests.support.processes import Processes

ATTACK = """<!doctype html>
<title>waiting</title>
<script>
  const body = JSON.stringify({handler: "demo.echo", input: {message: "forged"}});
  Promise.allSettled([
    fetch("API/runs", {method: "POST", mode: "no-cors",
      headers: {"content-type": "text/plain"}, body}),
    fetch("API/runs", {method: "POST", mode: "no-cors",
      headers: {"content-type": "application/x-www-form-urlencoded"}, body}),
    fetch("API/runs", {method: "POST", mode: "no-cors", body}),
  ]).then(() => { document.title = "sent"; });
</script>
"""

CANCEL_ATTACK = """<!doctype html>
<title>waiting</title>
<script>
  fetch("API/runs/RUN/cancel", {method: "POST", mode: "no-cors"})
    .finally(() => { document.title = "sent"; });
</script>
"""


@pytest.fixture
def attacker_origin() -> Iterator[tuple[str, list[str]]]:
    """A page server on its own port (another origin); yields its URL and where to put the API.

    The holder takes the API's URL first, then optionally the page to serve instead of ATTACK.
    """
    holder: list[str] = []

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = holder[1] if len(holder) > 1 else ATTACK
            html = page.replace("API", holder[0]).encode()
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", holder
    server.shutdown()
    server.server_close()


def test_a_no_cors_post_from_another_origin_creates_no_run(
    processes: Processes, context: BrowserContext, attacker_origin: tuple[str, list[str]]
) -> None:
    _, api = processes.api()
    page_url, holder = attacker_origin
    holder.append(api)
    assert page_url.rsplit(":", 1)[1] != api.rsplit(":", 1)[1], "the page must be cross-origin"

    page = context.new_page()
    answers: list[int] = []
    page.on(
        "response",
        lambda response: (
            answers.append(response.status)
            if response.url == f"{api}/runs" and response.request.method == "POST"
            else None
        ),
    )
    page.goto(page_url)
    page.wait_for_function("document.title === 'sent'")
    for _ in range(200):  # the response events may trail the page's promise a little
        if len(answers) == 3:
            break
        page.wait_for_timeout(50)

    # the forged requests reached the API (the browser sent them) and were refused by
    # their Origin before their bodies were read (without that, the JSON rule's 415)
    assert sorted(answers) == [403, 403, 403], answers
    listing = httpx.get(f"{api}/runs", timeout=30).json()
    assert listing["items"] == [], "a cross-origin page created a run"


def test_a_no_cors_cancel_from_another_origin_cancels_nothing(
    processes: Processes, context: BrowserContext, attacker_origin: tuple[str, list[str]]
) -> None:
    _, api = processes.api()
    created = httpx.post(
        f"{api}/runs", json={"handler": "demo.echo", "input": {"message": "mine"}}, timeout=30
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    page_url, holder = attacker_origin
    holder.extend([api, CANCEL_ATTACK.replace("RUN", run_id)])

    page = context.new_page()
    answers: list[int] = []
    page.on(
        "response",
        lambda response: answers.append(response.status) if "/cancel" in response.url else None,
    )
    page.goto(page_url)
    page.wait_for_function("document.title === 'sent'")
    for _ in range(200):
        if answers:
            break
        page.wait_for_timeout(50)

    assert answers == [403], answers
    run = httpx.get(f"{api}/runs/{run_id}", timeout=30).json()
    assert run["status"] == "queued", "a cross-origin page cancelled a run"
    assert run["cancel_requested_at"] is None
