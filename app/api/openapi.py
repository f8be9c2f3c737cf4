"""Completes the generated OpenAPI document with what FastAPI cannot see.

FastAPI documents what each route declares. Some answers come from elsewhere:
the problem handlers (500 for anything unexpected, 503 when Redis is down), the
body size middleware (413), request validation (422) and the authentication
middleware (401). This module adds those to every operation they apply to and
makes every error response point at the ``Problem`` schema under
``application/problem+json``, the media type the API actually sends, so a client
generated from ``/openapi.json`` (or schemathesis) knows every code it can get.

Installed by :func:`app.api.app.create_app`; the document is built and completed
on its first use (the first ``/openapi.json``) and cached on the app, which is what
FastAPI serves from then on. Not at start: building it is most of what
``create_app`` would cost (about 0.3 s of CPU), paid by every API process and every
in-process app whether or not anyone ever reads the document.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.api.problems import PROBLEM_JSON
from app.api.scopes import required_role
from app.models.api import Problem

PROBLEM_REF = "#/components/schemas/Problem"
REPLACEABLE_REFS = frozenset({None, PROBLEM_REF, "#/components/schemas/HTTPValidationError"})
SECURITY_SCHEME = "bearerKey"

FORBIDDEN = "The key's role is below the role this operation needs (`x-required-role`)"
UNAUTHORIZED = "Missing or wrong `Authorization: Bearer <key>` (see `WWW-Authenticate`)"
TOO_LARGE = "The body is over the configured size limit"
INVALID = "The request does not match the schema (details in `errors`)"
INTERNAL = "Unexpected error; the response carries no details (they go to the server log)"
UNAVAILABLE = "Redis cannot be reached; retry later"


def install_openapi(app: FastAPI, *, auth_enabled: bool, open_paths: frozenset[str]) -> None:
    """Make ``app.openapi()`` build the document once, completed, on its first call.

    ``open_paths`` are the paths that need no key (and do not touch Redis).
    """
    generate = app.openapi

    def completed_openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()  # FastAPI keeps it as app.openapi_schema: completed once
        complete_openapi(document, auth_enabled=auth_enabled, open_paths=open_paths)
        return document

    # FastAPI's documented way to extend the schema: replace the app's openapi method
    app.openapi = completed_openapi  # type: ignore[method-assign]


def complete_openapi(
    document: dict[str, Any], *, auth_enabled: bool, open_paths: frozenset[str]
) -> None:
    """Add to FastAPI's ``document`` (in place) the codes no route declares."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Problem", Problem.model_json_schema(ref_template=_ref("{model}")))
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            is_open = path in open_paths
            guarded = auth_enabled and not is_open
            _add_implicit_responses(operation, guarded=guarded, touches_redis=not is_open)
            for status, response in operation["responses"].items():
                if _is_error(status):
                    _use_problem_schema(response)
            if guarded:
                operation["security"] = [{SECURITY_SCHEME: []}]
                # the role table's answer, so a client sees what each call needs
                operation["x-required-role"] = required_role(method.upper(), path).value
    if auth_enabled:
        document["components"]["securitySchemes"] = {
            SECURITY_SCHEME: {"type": "http", "scheme": "bearer", "description": UNAUTHORIZED}
        }


def _add_implicit_responses(
    operation: dict[str, Any], *, guarded: bool, touches_redis: bool
) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    implicit = {"500": INTERNAL}
    if guarded:
        implicit["401"] = UNAUTHORIZED
        implicit["403"] = FORBIDDEN
    if touches_redis:
        implicit["503"] = UNAVAILABLE
    if "requestBody" in operation:
        implicit["413"] = TOO_LARGE
    if "requestBody" in operation or operation.get("parameters"):
        implicit["422"] = INVALID
    for status, description in implicit.items():
        responses.setdefault(status, {"description": description})


def _is_error(status: str) -> bool:
    return status[:1] in ("4", "5")


def _use_problem_schema(response: dict[str, Any]) -> None:
    """Point an error response at Problem, unless it documents a body of its own."""
    content: dict[str, Any] = response.get("content") or {}
    if all(_schema_ref(media) in REPLACEABLE_REFS for media in content.values()):
        response["content"] = {PROBLEM_JSON: {"schema": {"$ref": PROBLEM_REF}}}


def _schema_ref(media: dict[str, Any]) -> str | None:
    """The schema's $ref; None for no schema (replaceable), "inline" for one of its own."""
    schema = media.get("schema")
    if not schema:
        return None
    return str(schema.get("$ref", "inline"))


def _ref(name: str) -> str:
    return f"#/components/schemas/{name}"
