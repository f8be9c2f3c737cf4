"""``leasehold keys ...``: create, list, rotate and revoke scoped API keys (admin).

The secret of a created or rotated key is printed once, on its own line last (or in
``--json``); nothing else ever shows it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.api_calls import api_client as _api
from app.cli.options import ApiKey, ApiUrl, JsonFlag

if TYPE_CHECKING:
    from app.models.keys import KeySecret

keys_app = typer.Typer(
    rich_markup_mode=None,
    help="Create, list, rotate and revoke API keys (needs an admin key).",
    no_args_is_help=True,
)
ROLES = "read, submit, operate or admin"


@keys_app.command("create")
def keys_create(
    name: str,
    role: Annotated[str, typer.Option("--role", help=f"One of {ROLES}.")],
    expires_in_s: Annotated[
        int | None, typer.Option("--expires-in-s", help="Seconds until it stops working.")
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="The one namespace it reaches (default: every one)."),
    ] = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """A new key with one role; prints its secret once."""
    with _api(api_url, api_key) as client:
        key = client.create_key(name, role, expires_in_s, namespace)
    expires = key.expires_at.isoformat() if key.expires_at else "never"
    _print_secret(
        key, as_json, f"created {key.id} ({key.name}, {key.role.value}, expires {expires})"
    )


@keys_app.command("list")
def keys_list(as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None) -> None:
    """Every live stored key: id, name, role, created, expires (never a secret)."""
    with _api(api_url, api_key) as client:
        page = client.keys()
    if as_json:
        typer.echo(page.model_dump_json())
        return
    typer.echo(f"{'id':<18} {'name':<24} {'role':<8} {'created':<26} expires")
    for key in page.items:
        expires = key.expires_at.isoformat() if key.expires_at else "never"
        typer.echo(
            f"{key.id:<18} {key.name:<24} {key.role.value:<8} "
            f"{key.created_at.isoformat():<26} {expires}"
        )


@keys_app.command("rotate")
def keys_rotate(
    key_id: str,
    grace_s: Annotated[
        int | None,
        typer.Option("--grace-s", help="Seconds the old secret keeps working (server default)."),
    ] = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """A new secret for the key; prints it once. The old one works until the grace ends."""
    with _api(api_url, api_key) as client:
        key = client.rotate_key(key_id, grace_s)
    until = key.previous_valid_until.isoformat() if key.previous_valid_until else "now"
    _print_secret(key, as_json, f"rotated {key.id}; the old secret works until {until}")


@keys_app.command("revoke")
def keys_revoke(key_id: str, api_url: ApiUrl = None, api_key: ApiKey = None) -> None:
    """Revoke the key: both its secrets stop (other API processes: within their cache TTL)."""
    with _api(api_url, api_key) as client:
        client.revoke_key(key_id)
    typer.echo(f"revoked {key_id}")


def _print_secret(key: KeySecret, as_json: bool, headline: str) -> None:
    """The key as JSON, or the headline then the secret alone on the last line."""
    if as_json:
        typer.echo(key.model_dump_json())
        return
    typer.echo(headline)
    typer.echo("secret (shown once):")
    typer.echo(key.secret)
