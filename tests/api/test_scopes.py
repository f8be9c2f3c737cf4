"""Scoped keys x every route: each role gets through exactly the routes its rank covers.

Like tests/api/test_auth.py, the operations come from the app itself (the OpenAPI
document and its top-level routes), so a route added later without a line in
app/api/scopes.py fails here; and every operation is called with a key of every role.
"""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from app.api.auth import OPEN_PATHS
from app.api.scopes import CLUSTER_ONLY, SCOPES, required_role
from app.models.keys import Role
from tests.api.conftest import BOOTSTRAP
from tests.support.routes import served_operations

RUN_ID = "default.01ARZ3NDEKTSV4RRFFQ69G5FAV"
# endless streams: the in-process transport would buffer them forever; their role is
# still checked below (a refused call never starts the stream)
ENDLESS = {("GET", "/activity")}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def role_keys(keyed_api: httpx.AsyncClient) -> dict[Role, str]:
    """A stored key of every role, made through the API with the bootstrap key."""
    keys = {}
    for role in Role:
        answer = await keyed_api.post(
            "/keys", json={"name": f"who-{role}", "role": role}, headers=bearer(BOOTSTRAP)
        )
        assert answer.status_code == 201, answer.text
        keys[role] = answer.json()["secret"]
    return keys


def path_of(template: str) -> str:
    return (
        template.replace("{run_id}", RUN_ID)
        .replace("{key_id}", "k0123456789abcdef")
        .replace("{worker_id}", "w-nobody")
        .replace("{operation_id}", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
        .replace("{schedule_id}", "nightly")
        .replace("{name}", "nosuchqueue")
        .replace("{key}", "nosuchkey")
    )


def test_every_served_operation_declares_its_role(keyed_app: FastAPI) -> None:
    served = set(served_operations(keyed_app))
    guarded = {(method, path) for method, path in served if path not in OPEN_PATHS}
    assert guarded - set(SCOPES) == set(), "declare these in app/api/scopes.py"
    assert set(SCOPES) - served == set(), "app/api/scopes.py declares routes nobody serves"


def test_an_undeclared_route_needs_admin() -> None:
    assert required_role("POST", "/some/new/route") is Role.ADMIN
    assert required_role("HEAD", "/runs") is Role.READ


def test_roles_are_ordered() -> None:
    assert [role.value for role in sorted(Role, key=lambda r: r.rank)] == [
        "read",
        "submit",
        "operate",
        "admin",
    ]
    assert Role.ADMIN.allows(Role.READ) and not Role.SUBMIT.allows(Role.OPERATE)


async def test_every_operation_with_every_role_is_allowed_or_403_as_declared(
    keyed_api: httpx.AsyncClient, keyed_app: FastAPI, role_keys: dict[Role, str]
) -> None:
    for method, template in served_operations(keyed_app):
        if template in OPEN_PATHS:
            continue
        needed = SCOPES[(method, template)]
        for role, secret in role_keys.items():
            if role.allows(needed) and (method, template) in ENDLESS:
                continue
            # deleting a stored key would remove the keys this loop still uses
            if role.allows(needed) and method == "DELETE" and template == "/keys/{key_id}":
                continue
            response = await keyed_api.request(
                method, path_of(template), json={}, headers=bearer(secret)
            )
            where = (method, template, role.value, response.status_code, response.text[:200])
            if role.allows(needed):
                assert response.status_code not in (401, 403), where
            else:
                assert response.status_code == 403, where
                body = response.json()
                assert response.headers["content-type"] == "application/problem+json"
                assert body["required_role"] == needed.value
                assert repr(needed.value) in body["detail"]


async def test_the_bootstrap_key_is_admin_on_every_route(
    keyed_api: httpx.AsyncClient, keyed_app: FastAPI
) -> None:
    for method, template in served_operations(keyed_app):
        if (method, template) in ENDLESS or template in OPEN_PATHS:
            continue
        response = await keyed_api.request(
            method, path_of(template), json={}, headers=bearer(BOOTSTRAP)
        )
        assert response.status_code not in (401, 403), (method, template, response.text)


async def test_a_route_added_without_a_declared_role_needs_admin(
    keyed_api: httpx.AsyncClient, keyed_app: FastAPI, role_keys: dict[Role, str]
) -> None:
    async def undeclared() -> dict[str, str]:
        return {"ok": "yes"}

    keyed_app.add_api_route("/undeclared", undeclared, methods=["GET"])
    for role, secret in role_keys.items():
        response = await keyed_api.get("/undeclared", headers=bearer(secret))
        assert response.status_code == (200 if role is Role.ADMIN else 403), role


async def test_the_openapi_document_names_each_operations_role(
    keyed_api: httpx.AsyncClient,
) -> None:
    document = (await keyed_api.get("/openapi.json", headers=bearer(BOOTSTRAP))).json()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path in OPEN_PATHS:
                assert "x-required-role" not in operation
                continue
            assert operation["x-required-role"] == SCOPES[(method.upper(), path)].value
            assert "403" in operation["responses"], (method, path)


# -- roles x namespaces x routes ---------------------------------------------------------

ACME_OBJECTS = ("{run_id}", "{operation_id}", "{schedule_id}", "{name}", "{key}")


async def acme_objects(api: httpx.AsyncClient) -> dict[str, str]:
    """One of every kind of object in namespace ``acme``, made by the bootstrap key."""
    admin = bearer(BOOTSTRAP)
    in_acme = {**admin, "Leasehold-Namespace": "acme"}
    for name in ("acme", "bravo"):
        assert (await api.put(f"/namespaces/{name}", json={}, headers=admin)).status_code == 201
    assert (await api.put("/queues/work", headers=in_acme)).status_code == 201
    run = {"handler": "demo.echo", "input": {"message": "a"}, "queue": "work"}
    made = await api.post("/runs", json=run, headers=in_acme)
    assert made.status_code == 201, made.text
    schedule = {"id": "nightly", "cron": "30 2 * * *", "run": run}
    assert (await api.post("/schedules", json=schedule, headers=in_acme)).status_code == 201
    limit = {"limit": 5, "period_s": 1}
    assert (await api.put("/rate-limits/rk", json=limit, headers=in_acme)).is_success
    retry = await api.post("/runs/retry", json={"queue": "work"}, headers=in_acme)
    assert retry.status_code == 202, retry.text
    return {"run": made.json()["id"], "operation": retry.json()["id"]}


def acme_path(template: str, objects: dict[str, str]) -> str:
    return (
        template.replace("{run_id}", objects["run"])
        .replace("{operation_id}", objects["operation"])
        .replace("{schedule_id}", "nightly")
        .replace("{name}", "acme" if template.startswith("/namespaces") else "work")
        .replace("{key}", "rk")
        .replace("{key_id}", "k0123456789abcdef")
        .replace("{worker_id}", "w-nobody")
    )


async def acme_state(api: httpx.AsyncClient, objects: dict[str, str]) -> list[object]:
    """What a user of acme sees of its objects."""
    in_acme = {**bearer(BOOTSTRAP), "Leasehold-Namespace": "acme"}
    run = (await api.get(f"/runs/{objects['run']}", headers=in_acme)).json()
    schedule = (await api.get("/schedules/nightly", headers=in_acme)).json()
    return [
        (run["status"], run.get("cancel_requested")),
        (schedule["paused"], schedule["version"]),
        (await api.get("/queues/work", headers=in_acme)).status_code,
        (await api.get("/rate-limits/rk", headers=in_acme)).status_code,
        (await api.get(f"/operations/{objects['operation']}", headers=in_acme)).status_code,
        (await api.get("/namespaces/acme", headers=bearer(BOOTSTRAP))).status_code,
    ]


async def test_every_role_of_another_namespace_reaches_nothing_of_acme(
    keyed_api: httpx.AsyncClient, keyed_app: FastAPI
) -> None:
    """The matrix: every operation x every role of a key bound to ``bravo``, called with
    acme's ids. A role below the route's is a 403; otherwise acme's objects are a 404 to
    read, and nothing a bravo key sends changes them."""
    objects = await acme_objects(keyed_api)
    before = await acme_state(keyed_api, objects)
    bravo: dict[Role, str] = {}
    for role in (Role.READ, Role.SUBMIT, Role.OPERATE):
        body = {"name": f"bravo-{role}", "role": role, "namespace": "bravo"}
        made = await keyed_api.post("/keys", json=body, headers=bearer(BOOTSTRAP))
        assert made.status_code == 201, made.text
        bravo[role] = made.json()["secret"]
    for method, template in served_operations(keyed_app):
        if template in OPEN_PATHS or (method, template) in ENDLESS:
            continue
        needed = SCOPES[(method, template)]
        path = acme_path(template, objects)
        for role, secret in bravo.items():
            response = await keyed_api.request(method, path, json={}, headers=bearer(secret))
            where = (method, template, role.value, response.status_code, response.text[:200])
            assert response.status_code < 500, where
            if not role.allows(needed) or (method, template) in CLUSTER_ONLY:
                assert response.status_code == 403, where
                continue
            assert response.status_code not in (401, 403), where
            if method == "GET" and any(name in template for name in ACME_OBJECTS):
                assert response.status_code == 404, where
            # naming acme outright is refused whatever the route: the same 404 as a
            # namespace that does not exist
            named = await keyed_api.request(
                method, path, json={}, headers={**bearer(secret), "Leasehold-Namespace": "acme"}
            )
            assert named.status_code == 404, (*where, named.text[:200])
            assert named.json()["type"].endswith("namespace-not-found"), where
    assert await acme_state(keyed_api, objects) == before
