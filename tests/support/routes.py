"""Every (method, path template) an app serves, for tests that must cover them all.

FastAPI keeps included routers as nested, private objects in ``app.routes``, so
the operations come from the OpenAPI document (every route in the schema) plus
the top-level routes left out of it (``/openapi.json``, ``/docs``, ...).
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.routing import Route


def served_operations(app: FastAPI) -> list[tuple[str, str]]:
    """(METHOD, path template) pairs, sorted; HEAD is left out (it mirrors GET)."""
    operations = {
        (method.upper(), path)
        for path, methods in app.openapi()["paths"].items()
        for method in methods
    }
    for route in app.routes:
        if isinstance(route, Route):
            operations.update((method, route.path) for method in route.methods or ())
    return sorted(operation for operation in operations if operation[0] != "HEAD")


def served_paths(app: FastAPI) -> set[str]:
    """Every path template the app serves."""
    return {path for _, path in served_operations(app)}
