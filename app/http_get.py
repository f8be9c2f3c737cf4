"""One GET to the API over a plain socket: what ``runs get`` sends without httpx.

httpx (with httpcore, h11, its URL and header models, and ``urllib.request`` for the
proxy variables) is ~50 ms of a quiet core's CPU to import, a good part of a
``leasehold runs get`` in a shell loop (issue 19: <= 300 ms). For the case that loop
is made of (a plain ``http://`` URL, no proxy variable, an answer with a length and no
content coding) this module sends the bytes httpx's client would send, header for
header (``tests/test_http_get.py`` compares them), and reads the answer. For anything
else it answers :data:`UNSUPPORTED` *before* a byte is sent (https, a proxy, a URL or
key httpx would normalise or refuse), or after a reply it does not read as httpx
would (a chunked or compressed body, a 1xx, an unfinished header): the caller then
sends the same GET through httpx, whose answer is the one given, as before.

A failure to connect, send or receive is a :class:`Unreachable` with the text httpx's
``TransportError`` would carry (the ``OSError``'s, or httpx's class name when empty).
"""

from __future__ import annotations

import os
import re
import socket
from importlib.machinery import PathFinder
from typing import Final

UNSUPPORTED: Final = None
TIMEOUT_S = 30.0  # the client's default timeout (app.client.DEFAULT_TIMEOUT_S), each phase
MAX_HEAD_BYTES = 65_536
# hosts, ports, paths and ids that httpx sends as written (no case, percent or dot
# normalisation to mirror); anything else goes through httpx
_URL = re.compile(
    r"http://(?P<host>[a-z0-9-]+(?:\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])"
    r"(?::(?P<port>[1-9][0-9]{0,4}))?(?P<path>(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*)",
    re.ASCII,
)
_SEGMENT = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*", re.ASCII)
_HEADER_VALUE = re.compile(r"[\x21-\x7e]+", re.ASCII)
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-9][0-9]{2})(?: [^\r\n]*)?")


class Unreachable(Exception):
    """The API could not be reached or stopped answering; ``str()`` is httpx's text."""


class Answer:
    """A complete answer: its status and its body's bytes."""

    __slots__ = ("body", "status")

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body


def get(base_url: str, path: str, api_key: str | None) -> Answer | None:
    """GET ``base_url`` + ``path`` as ``httpx.Client(base_url, headers=...)`` would.

    ``path`` is ``/segment/...``. ``None`` (:data:`UNSUPPORTED`): send it through httpx.
    Raises :class:`Unreachable` when connecting, sending or receiving fails.
    """
    request = _request(base_url, path, api_key)
    if request is None:
        return UNSUPPORTED
    host, port, data = request
    try:
        # the host as bytes: a str is encoded with the "idna" codec first, whose import
        # (stringprep, unicodedata) costs more than the request; it is ASCII (_URL)
        address = (host.encode("ascii"), port)
        sock = socket.create_connection(address, TIMEOUT_S)  # type: ignore[arg-type]
    except OSError as exc:
        raise Unreachable(_text(exc, "Connect")) from None
    with sock:
        try:
            sock.sendall(data)
        except OSError as exc:
            raise Unreachable(_text(exc, "Write")) from None
        return _read_answer(sock)


def _request(base_url: str, path: str, api_key: str | None) -> tuple[str, int, bytes] | None:
    """Where to connect and the request's bytes, or ``None`` if httpx must send it."""
    url = _URL.fullmatch(base_url)
    user_agent = _httpx_user_agent()
    segments = path.split("/")
    if (
        url is None
        or user_agent is None
        or _proxied()
        or segments[0] != ""
        or not all(_SEGMENT.fullmatch(part) for part in segments[1:])
        or (api_key and not _HEADER_VALUE.fullmatch(api_key))
    ):
        return None
    host, port = url["host"], int(url["port"] or 80)
    if port > 65535:
        return None
    # httpx leaves the default port out of Host and sends the base URL's path first
    netloc = host if port == 80 else f"{host}:{port}"
    lines = [
        f"GET {url['path']}{path} HTTP/1.1",
        f"Host: {netloc}",
        "Accept: */*",
        "Accept-Encoding: gzip, deflate",
        "Connection: keep-alive",
        f"User-Agent: {user_agent}",
    ]
    if api_key:
        lines.append(f"Authorization: Bearer {api_key}")
    return host.strip("[]"), port, ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def _proxied() -> bool:
    """Whether httpx would look for a proxy: a ``*_proxy`` variable, in any case."""
    return any(name.lower().endswith("_proxy") for name in os.environ)


def _httpx_user_agent() -> str | None:
    """httpx's ``User-Agent`` (``python-httpx/<version>``), read without importing httpx.

    ``None`` if httpx or its version file is not where httpx keeps it, or if httpx
    would advertise more codings than gzip and deflate (brotli or zstandard present).
    """
    if any(PathFinder.find_spec(name) for name in ("brotli", "brotlicffi", "zstandard")):
        return None
    spec = PathFinder.find_spec("httpx")
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = os.path.join(next(iter(spec.submodule_search_locations)), "__version__.py")
    try:
        with open(version_file, encoding="utf-8") as source:
            found = re.search(r'^__version__ = "([0-9][0-9A-Za-z.+-]*)"$', source.read(), re.M)
    except OSError:
        return None
    return f"python-httpx/{found[1]}" if found else None


def _read_answer(sock: socket.socket) -> Answer | None:
    """The answer to the request sent on ``sock``, or ``None`` if httpx must read it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            return UNSUPPORTED
        chunk = _receive(sock)
        if not chunk:
            return UNSUPPORTED  # httpx: "Server disconnected without sending a response."
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.split(b"\r\n")
    status = _STATUS_LINE.fullmatch(status_line)
    headers: dict[bytes, bytes] = {}
    for line in header_lines:
        name, colon, value = line.partition(b":")
        if not colon or name.lower() in headers:
            return UNSUPPORTED
        headers[name.lower()] = value.strip()
    length = headers.get(b"content-length", b"")
    if (
        status is None
        or int(status[1]) < 200
        or b"transfer-encoding" in headers
        or headers.get(b"content-encoding", b"identity") != b"identity"
        or not length.isdigit()
    ):
        return UNSUPPORTED
    while len(body) < int(length):
        chunk = _receive(sock)
        if not chunk:
            return UNSUPPORTED
        body += chunk
    return Answer(int(status[1]), body[: int(length)])


def _receive(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65_536)
    except OSError as exc:
        raise Unreachable(_text(exc, "Read")) from None


def _text(exc: OSError, phase: str) -> str:
    """What ``str()`` of httpx's error says: the OSError's text, else its class's name."""
    timed_out = isinstance(exc, TimeoutError)
    return str(exc) or f"{phase}{'Timeout' if timed_out else 'Error'}"
