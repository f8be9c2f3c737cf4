"""A page on another origin cannot create runs, even with auth off.

A browser sends a cross-origin POST without asking first (no CORS preflight)
only when it is "simple": ``mode: 'no-cors'`` and a body labelled ``text/plain``
or as a form. The API parses JSON only when it is labelled ``application/json``,
so such a request is answered 415 and creates nothing. A real Chromium loads an
attacker's page from another local port and makes exactly that request.
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


@pytest.fixture
def attacker_origin() -> Iterator[tuple[str, list[str]]]:
    """A page server on its own port (another origin); yields its URL and where to put the API."""
    holder: list[str] = []

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            html = ATTACK.replace("API", holder[0]).encode()
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

    # the forged requests reached the API (the browser sent them) and were refused
    assert sorted(answers) == [415, 415, 415], answers
    listing = httpx.get(f"{api}/runs", timeout=30).json()
    assert listing["items"] == [], "a cross-origin page created a run"
