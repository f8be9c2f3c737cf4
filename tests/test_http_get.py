"""``runs get``'s GET without httpx (app.http_get): httpx's request, or httpx's turn.

A loopback server (the CLI benchmark's stub) records what each client sends and
answers what the test gives it: the bytes must equal httpx's, and every answer the
light reader does not read as httpx would (chunked, compressed, cut short) must be
left to httpx.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from app import http_get
from app.client import Client
from app.errors import ApiError
from app.httpx_import import httpx
from bench.cli_startup import StubApi

JSON_404 = b'{"detail":"nope"}'


@pytest.fixture
def server() -> Iterator[StubApi]:
    stub = StubApi(
        b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(JSON_404) + JSON_404
    )
    yield stub
    stub.close()


@pytest.mark.parametrize(
    ("base", "path", "key"),
    [
        ("http://127.0.0.1:{port}", "/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV", None),
        ("http://localhost:{port}", "/runs/q.X", "k" * 20),
        ("http://127.0.0.1:{port}/pre/fix", "/runs/q-1_x~y", "a.b/c+d=e~f-g_h"),
    ],
)
def test_the_request_is_the_bytes_httpx_sends(
    base: str, path: str, key: str | None, server: StubApi
) -> None:
    url = base.format(port=server.port)
    answer = http_get.get(url, path, key)
    assert answer is not None and answer.status == 404 and answer.body == JSON_404
    light = server.requests[-1]
    with Client(url, api_key=key) as client, pytest.raises(ApiError):
        client.get(path.removeprefix("/runs/"))
    assert light == server.requests[-1]
    assert light.startswith(f"GET {url.split(str(server.port))[1]}{path} ".encode())


@pytest.mark.parametrize(
    ("base", "path", "key"),
    [
        ("https://127.0.0.1:{port}", "/runs/q.X", None),
        ("http://LOCALHOST:{port}", "/runs/q.X", None),
        ("http://127.0.0.1:{port}/a/../b", "/runs/q.X", None),
        ("http://127.0.0.1:{port}", "/runs/..", None),
        ("http://127.0.0.1:{port}", "/runs/q%20X", None),
        ("http://127.0.0.1:{port}", "/runs/q X", None),
        ("http://127.0.0.1:{port}", "/runs/q.X?x=1", None),
        ("http://127.0.0.1:{port}", "/runs/q.X", "two words"),
        ("http://127.0.0.1:{port}", "/runs/q.X", "k\r\nX-Injected: 1"),
        ("http://127.0.0.1:99999", "/runs/q.X", None),
        ("http://user@127.0.0.1:{port}", "/runs/q.X", None),
        ("not-a-url", "/runs/q.X", None),
    ],
)
def test_what_httpx_would_normalise_or_refuse_is_left_to_it_before_a_byte_is_sent(
    base: str, path: str, key: str | None, server: StubApi
) -> None:
    assert http_get.get(base.format(port=server.port), path, key) is None
    assert server.requests == []


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "all_proxy", "No_Proxy"])
def test_a_proxy_variable_leaves_the_request_to_httpx(
    variable: str, server: StubApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "http://127.0.0.1:9")
    assert http_get.get(f"http://127.0.0.1:{server.port}", "/runs/q.X", None) is None
    assert server.requests == []


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{}",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
        b"SMTP ready\r\n\r\n",
        b"",
    ],
    ids=["chunked", "gzip", "no-length", "cut-short", "two-lengths", "1xx", "not-http", "eof"],
)
def test_an_answer_it_does_not_read_as_httpx_would_is_left_to_httpx(
    reply: bytes, server: StubApi
) -> None:
    server.reply = reply
    assert http_get.get(f"http://127.0.0.1:{server.port}", "/runs/q.X", None) is None
    assert len(server.requests) == 1


def test_a_complete_answer_is_its_status_and_body(server: StubApi) -> None:
    server.reply = b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\nX-A: b\r\n\r\n{"id":"x"}\n'
    answer = http_get.get(f"http://127.0.0.1:{server.port}", "/runs/x", None)
    assert answer is not None and (answer.status, answer.body) == (200, b'{"id":"x"}\n')


def test_a_refused_connection_says_what_httpx_says() -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    with pytest.raises(http_get.Unreachable) as light:
        http_get.get(url, "/runs/q.X", None)
    with Client(url) as client, pytest.raises(httpx.ConnectError) as heavy:
        client.get("q.X")
    assert str(light.value) == str(heavy.value) and str(light.value)
