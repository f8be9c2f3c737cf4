"""``leasehold namespaces ...``: declare tenants, set their quotas, read their usage (admin).

A namespace's quotas are replaced whole by ``put`` (``--quota live_runs=1000`` once per
quota; none: no quota). ``show`` prints what it holds now, as ``GET /namespaces/{name}``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.api_calls import api_client as _api
from app.cli.api_calls import fail
from app.cli.options import ApiKey, ApiUrl, JsonFlag

namespaces_app = typer.Typer(
    rich_markup_mode=None,
    help="Declare namespaces (tenants), set their quotas, read their usage (admin).",
    no_args_is_help=True,
)


def _quotas(pairs: list[str]) -> dict[str, int]:
    """``["live_runs=1000", ...]`` as the API takes them; a malformed pair exits 1."""
    quotas: dict[str, int] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not value.strip().isdigit():
            raise fail(f"--quota {pair!r}: write NAME=INTEGER, e.g. live_runs=1000")
        quotas[name.strip()] = int(value)
    return quotas


@namespaces_app.command("put")
def namespaces_put(
    name: str,
    quota: Annotated[
        list[str] | None,
        typer.Option("--quota", help="NAME=INTEGER, once per quota (live_runs, creates_per_s...)."),
    ] = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Declare the namespace, or replace its quotas whole."""
    quotas = _quotas(quota or [])
    with _api(api_url, api_key) as client:
        namespace = client.put_namespace(name, **quotas)
    if as_json:
        typer.echo(namespace.model_dump_json())
        return
    shown = ", ".join(f"{k}={v}" for k, v in namespace.quotas.model_dump().items() if v is not None)
    typer.echo(f"{namespace.name}: {shown or 'no quotas'}")


@namespaces_app.command("list")
def namespaces_list(
    as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None
) -> None:
    """Every namespace and its quotas, ``default`` first."""
    with _api(api_url, api_key) as client:
        page = client.namespaces()
    if as_json:
        typer.echo(page.model_dump_json())
        return
    for namespace in page.items:
        quotas = namespace.quotas.model_dump()
        shown = ", ".join(f"{k}={v}" for k, v in quotas.items() if v is not None)
        typer.echo(f"{namespace.name:<32} {shown or 'no quotas'}")


@namespaces_app.command("show")
def namespaces_show(
    name: str, as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None
) -> None:
    """One namespace: its quotas and what it holds now."""
    with _api(api_url, api_key) as client:
        namespace = client.namespace(name)
    if as_json or namespace.usage is None:
        typer.echo(namespace.model_dump_json())
        return
    usage = namespace.usage
    typer.echo(
        f"{namespace.name}: live_runs={usage.live_runs} stored_bytes~{usage.stored_bytes} "
        f"queues={usage.queues} schedules={usage.schedules} (measured {usage.measured_at})"
    )


@namespaces_app.command("delete")
def namespaces_delete(name: str, api_url: ApiUrl = None, api_key: ApiKey = None) -> None:
    """Forget a namespace that holds no queue and no schedule."""
    with _api(api_url, api_key) as client:
        client.delete_namespace(name)
    typer.echo(f"deleted {name}")
