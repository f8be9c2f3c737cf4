"""Which role each route needs: the one table, checked by :class:`app.api.auth.BearerAuth`.

Every (method, path template) the app serves is in :data:`SCOPES`, and
``tests/api/test_scopes.py`` fails when a served operation is missing from it or the
table names one that is not served. A route missing anyway needs ``admin`` (fail
closed): it is never open to a lesser key by accident.

The middleware runs before routing, so it matches the request against the table's own
templates (:func:`role_for`), literal segments before parameters, as the router would
pick ``/runs/batch`` over ``/runs/{run_id}``. A path or method the table does not
declare needs ``admin`` too: a route added without its line here answers 403 to every
lesser key (and the test fails) rather than being open.
"""

from __future__ import annotations

import re

from starlette.routing import compile_path

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
    ("GET", "/runs/{run_id}/history"): READ,
    ("GET", "/schedules"): READ,
    ("GET", "/schedules/{schedule_id}"): READ,
    ("GET", "/workers"): READ,
    ("GET", "/builds"): READ,
    ("GET", "/builds/{build_id}"): READ,
    # who holds a run now (a gate's online check); a token that reads one run's events
    ("GET", "/leases/{run_id}"): READ,
    ("POST", "/runs/{run_id}/stream-token"): READ,
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
    # which code runs a pinned run (issue 36)
    ("POST", "/runs/{run_id}/upgrade"): OPERATE,
    ("POST", "/builds/{build_id}/upgrade"): OPERATE,
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
    # the namespaces: declared and given quotas by an admin; a tenant reads its own
    ("GET", "/namespaces"): ADMIN,
    ("GET", "/namespaces/{name}"): READ,
    ("PUT", "/namespaces/{name}"): ADMIN,
    ("DELETE", "/namespaces/{name}"): ADMIN,
}
# what the audit stream records: every call of a route that needs at least this role
AUDITED = OPERATE
# what shows every namespace at once, so no key bound to one namespace may call it
# (403): the process's metrics hold every namespace's series
CLUSTER_ONLY: frozenset[tuple[str, str]] = frozenset({("GET", "/metrics")})


def required_role(method: str, template: str) -> Role:
    """The role a call of (method, template) needs; ``admin`` for one the table lacks."""
    if method == "HEAD":
        method = "GET"  # HEAD answers what GET would, without the body
    return SCOPES.get((method, template), ADMIN)


def _compiled() -> list[tuple[str, re.Pattern[str], str]]:
    """(method, regex, template) of every declared operation, the most literal first."""
    rows = [(method, compile_path(template)[0], template) for method, template in SCOPES]
    return sorted(rows, key=lambda row: (row[2].count("{"), -len(row[2])))


_MATCHERS = _compiled()


def route_of(method: str, path: str) -> tuple[str, str] | None:
    """The declared (method, template) a request for ``path`` is, or None."""
    if method == "HEAD":
        method = "GET"
    for declared, regex, template in _MATCHERS:
        if declared == method and regex.match(path):
            return method, template
    return None


def role_for(method: str, path: str) -> Role:
    """The role a request for ``path`` needs (``admin`` when the table declares none)."""
    route = route_of(method, path)
    return ADMIN if route is None else SCOPES[route]


def cluster_only(method: str, path: str) -> bool:
    """Whether a request for ``path`` shows every namespace (no bound key may call it)."""
    return route_of(method, path) in CLUSTER_ONLY
