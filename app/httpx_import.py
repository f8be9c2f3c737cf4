"""``httpx``, imported without its command-line client: ~35 ms less for every CLI command.

``import httpx`` also imports ``httpx._main``, the ``httpx`` console script, whenever
its optional dependencies are installed, and they are (typer brings rich): click,
rich and pygments, about a third of what a ``leasehold runs get`` costs to start on
this machine (BENCHMARKS.md, CLI start-up). httpx itself falls back to a stub ``main``
when that import fails, so this module makes it fail for the one import
(:func:`app.imports.absent`): a later ``import httpx._main`` works as usual. Nothing
in Leasehold calls ``httpx.main``; the ``httpx`` script in its own process is
untouched.

Import httpx from here (``from app.httpx_import import httpx``) wherever a process may
import it first; :func:`verifies` says when a client needs its certificates.
"""

from __future__ import annotations

from app.imports import absent

with absent("httpx._main"):
    import httpx as httpx


def verifies(base_url: str) -> bool:
    """Certificates are checked for an https URL; a plain-http one has none to check.

    httpx loads the whole CA bundle for every client it makes (~35 ms of CPU here, and
    ``httpx.get`` makes one per call), even for ``http://`` where no TLS happens. Give
    ``verify=verifies(url)`` only to a client that sends paths relative to ``url`` and
    never follows redirects: no request of a plain-http one can then reach an https
    server unverified.
    """
    return not base_url.lower().startswith("http://")
