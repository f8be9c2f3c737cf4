"""Which role each route needs: the one table, checked by :class:`app.api.auth.BearerAuth`.

Every (method, path template) the app serves is in :data:`SCOPES`, and
``tests/api/test_scopes.py`` fails when a served operation is missing from it or the
table names one that is not served. A route missing anyway needs ``admin`` (fail
closed): it is never open to a lesser key by accident.

The middleware runs before routing, so it finds the template the way the router will:
the first route of the app that fully matches the request (:func:`route_template`).
A request no route matches (404, 405) needs only a valid key: it reaches nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from app.models.keys import Role

READ, SUBMIT, OPERATE, ADMIN = Role.READ, Role.SUBMIT, Role.OPERATE, Role.ADMIN

SCOPES: dict[tuple[str, str], Role] = {
    # reading: runs, their events, queues, limits, schedules, workers, metrics, the spec
    ("GET", "/activity"): READ,
    ("GET", "/config"): READ,
    ("GET", "/handlers"): READ,
    ("GET", "/metrics"): READ,
    ("GET", "/openapi.json"): READ,
    ("GET", "/operations/{operation_id}"): READ,
    ("GET", "/queues"): READ,
    ("GET", "/queues/{name}"): READ,
    ("GET", "/queues/{name}/limits"): READ,
    ("GET", "/queues/{name}/series"): READ,
    ("GET", "/rate-limits"): READ,
    ("GET", "/rate-limits/{key}"): READ,
    ("GET", "/readyz"): READ,
    ("GET", "/runs"): READ,
    ("GET", "/runs/{run_id}"): READ,
    ("GET", "/runs/{run_id}/children"): READ,
    ("GET", "/runs/{run_id}/events"): READ,
    ("GET", "/schedules"): READ,
    ("GET", "/schedules/{schedule_id}"): READ,
    ("GET", "/workers"): READ,
    # submitting: one run at a time — create, steer, answer, re-run
    ("POST", "/runs"): SUBMIT,
    ("POST", "/runs/batch"): SUBMIT,
    ("PATCH", "/runs/{run_id}"): SUBMIT,
    ("POST", "/runs/{run_id}/cancel"): SUBMIT,
    ("POST", "/runs/{run_id}/resolve"): SUBMIT,
    ("POST", "/runs/{run_id}/resume"): SUBMIT,
    ("POST", "/runs/{run_id}/retry"): SUBMIT,
    ("POST", "/runs/{run_id}/signals/{name}"): SUBMIT,
    # operating: what changes many runs or the queues' shape; audited
    ("DELETE", "/runs/{run_id}"): OPERATE,
    ("POST", "/runs/purge"): OPERATE,
    ("POST", "/runs/retry"): OPERATE,
    ("POST", "/operations/{operation_id}/cancel"): OPERATE,
    ("POST", "/operations/{operation_id}/resume"): OPERATE,
    ("PUT", "/queues/{name}"): OPERATE,
    ("DELETE", "/queues/{name}"): OPERATE,
    ("PUT", "/queues/{name}/limits"): OPERATE,
    ("PUT", "/rate-limits/{key}"): OPERATE,
    ("DELETE", "/rate-limits/{key}"): OPERATE,
    ("POST", "/schedules"): OPERATE,
    ("PATCH", "/schedules/{schedule_id}"): OPERATE,
    ("DELETE", "/schedules/{schedule_id}"): OPERATE,
    ("POST", "/schedules/{schedule_id}/backfill"): OPERATE,
    ("POST", "/schedules/{schedule_id}/pause"): OPERATE,
    ("POST", "/schedules/{schedule_id}/resume"): OPERATE,
    ("POST", "/schedules/{schedule_id}/trigger"): OPERATE,
    # administering: the workers and the keys themselves; audited
    ("POST", "/workers/{worker_id}/drain"): ADMIN,
    ("GET", "/keys"): ADMIN,
    ("POST", "/keys"): ADMIN,
    ("POST", "/keys/{key_id}/rotate"): ADMIN,
    ("DELETE", "/keys/{key_id}"): ADMIN,
    ("GET", "/audit"): ADMIN,
}
# what the audit stream records: every call of a route that needs at least this role
AUDITED = OPERATE


def required_role(method: str, template: str) -> Role:
    """The role a call needs; ``admin`` for an operation the table does not declare."""
    if method == "HEAD":
        method = "GET"  # HEAD answers what GET would, without the body
    return SCOPES.get((method, template), ADMIN)


def route_template(routes: Iterable[BaseRoute], scope: Scope) -> str | None:
    """The path template of the route the router will pick, or None (404/405 ahead)."""
    for route in routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return getattr(route, "path", None)
    return None
