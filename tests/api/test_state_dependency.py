"""The routes' ApiState dependency is awaited in the request's task: a plain function
would be called in FastAPI's thread pool, a thread hop on every request (issue 19 aim 5)."""

from __future__ import annotations

import inspect

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from app.api.routes.runs import router
from app.api.state import api_state, state_dependency


def calls(dependant: Dependant) -> list[object]:
    found: list[object] = []
    for sub in dependant.dependencies:
        found += [sub.call, *calls(sub)]
    return found


def test_the_runs_routes_take_their_state_without_a_thread() -> None:
    runs = [route for route in router.routes if isinstance(route, APIRoute)]
    assert any(route.path == "/runs" and "POST" in route.methods for route in runs)
    for route in runs:
        called = calls(route.dependant)
        assert api_state not in called, route.path
        for call in called:
            assert call is not None
            assert inspect.iscoroutinefunction(call) or inspect.isclass(call), (route.path, call)
    assert any(state_dependency in calls(route.dependant) for route in runs)
