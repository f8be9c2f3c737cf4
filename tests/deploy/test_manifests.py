"""docker-compose.yml, deploy/Dockerfile and deploy/k8s, checked against the code.

No container engine runs here, so these files are read as data and held to what
the code really has: every command they run exists in the CLI (``app/cli/``)
with the options they pass, every ``LEASEHOLD_*`` variable is a field of
``Settings`` with a valid value, every probed path is a route of the API, ports
agree, and every graceful-stop period outlasts a worker's drain plus its release.
"""

from __future__ import annotations

import importlib
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import typer
import yaml

from app.api.app import create_app
from app.cli import main as cli
from app.errors import ConfigurationError
from app.executor.drain import SETTLE_AFTER_DRAIN_S
from app.settings import ENV_PREFIX, Settings, load_settings
from tests.deploy.files import (
    COMPOSE,
    COMPOSE_PUBLIC,
    DOCKERFILE,
    K8S,
    K8S_REDIS_CONF,
    REDIS_CONF,
    load_compose,
    redis_directives,
    redis_server,
    rendered_objects,
)
from tests.support.processes import REPO_ROOT, run_cli
from tests.support.routes import served_paths

SETTING_NAMES = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
LEASEHOLD_SERVICES = ("api", "worker", "reconciler")
REQUIRED_REDIS = {
    "appendonly": "yes",
    "appendfsync": "everysec",
    "maxmemory-policy": "noeviction",
}
DEMO_MODULE = "app.demo"
# compose's `${VAR:?message}`: the variable must be set, compose stops otherwise
REQUIRED_VARIABLE = re.compile(r"\$\{([A-Z0-9_]+):\?[^}]+\}")


# --- helpers ------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def resolve_cli(argv: list[str]) -> Any:
    """The CLI command ``leasehold <argv>`` runs; fails on an unknown command or option.

    Walks the command tree typer builds from ``app.cli.main.app`` (groups have
    ``commands``; typer vendors its own click, so no isinstance checks).
    """
    command: Any = typer.main.get_command(cli.app)
    words = list(argv)
    while hasattr(command, "commands"):
        assert words, f"`leasehold {' '.join(argv)}` names a group, not a command"
        name = words.pop(0)
        assert name in command.commands, f"`leasehold {' '.join(argv)}`: no command {name!r}"
        command = command.commands[name]
    options = {opt for param in command.params for opt in getattr(param, "opts", [])}
    for word in words:
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            assert flag in options, f"`leasehold {' '.join(argv)}`: no option {flag}"
    return command


def option_value(argv: list[str], flag: str) -> str | None:
    for index, word in enumerate(argv):
        if word == flag and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith(f"{flag}="):
            return word.split("=", 1)[1]
    return None


def route_paths() -> set[str]:
    return served_paths(create_app(Settings()))


def check_probe_command(argv: list[str]) -> None:
    """A probe that runs ``leasehold ...`` resolves in the CLI; its --path is a route."""
    if not argv or argv[0] != "leasehold":
        return
    command = resolve_cli(argv[1:])
    path = option_value(argv, "--path")
    if command.name == "api":
        assert (path or "/readyz") in route_paths(), f"{argv}: no such route"


def env_problems(env: dict[str, Any], where: str) -> list[str]:
    """What is wrong with a file's LEASEHOLD_* variables: unknown names, invalid values."""
    names = {name for name in env if name.startswith(ENV_PREFIX)}
    unknown = names - SETTING_NAMES
    if unknown:
        return [f"{where}: not settings: {sorted(unknown)}"]
    values = {
        name.removeprefix(ENV_PREFIX).lower(): _literal(str(value))
        for name, value in env.items()
        # a variable the user must set has no value to check here
        if name in names and not REQUIRED_VARIABLE.fullmatch(str(value))
    }
    try:
        load_settings(**values)
    except ConfigurationError as exc:
        return [f"{where}: {exc}"]
    return []


def _literal(value: str) -> str:
    """``${VAR:-default}`` (compose interpolation) becomes its default."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def duration_s(value: str | int | float) -> float:
    """A compose duration (``45s``, ``1m30s``, ``500ms``) in seconds."""
    if isinstance(value, int | float):
        return float(value)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", value)
    assert parts and "".join(n + u for n, u in parts) == value, f"bad duration {value!r}"
    return sum(float(number) * units[unit] for number, unit in parts)


def grace_problems(grace_s: float, env: dict[str, Any], where: str) -> list[str]:
    """A stop grace period that would kill a worker before its drain and release end."""
    drain_s = float(_literal(str(env.get("LEASEHOLD_DRAIN_TIMEOUT_S", Settings().drain_timeout_s))))
    if grace_s > drain_s + SETTLE_AFTER_DRAIN_S:
        return []
    return [f"{where}: grace {grace_s}s <= drain {drain_s}s + release"]


def demo_problems(env: dict[str, Any], where: str) -> list[str]:
    """A file that enables the demo handlers (they fetch URLs a client names: SSRF)."""
    modules = [m.strip() for m in str(env.get("LEASEHOLD_HANDLERS", "")).split(",")]
    if any(m == DEMO_MODULE or m.startswith(f"{DEMO_MODULE}.") for m in modules):
        return [f"{where}: LEASEHOLD_HANDLERS enables {DEMO_MODULE}"]
    return []


# --- docker-compose.yml ---------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = load_compose(COMPOSE)
    return document


def leasehold_services(compose: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name in LEASEHOLD_SERVICES:
        yield name, compose["services"][name]


def test_compose_has_redis_api_workers_and_an_optional_reconciler(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"redis", "api", "worker", "reconciler"} <= set(services)
    assert services["worker"]["deploy"]["replicas"] == 3
    assert services["reconciler"]["profiles"], "the standalone reconciler is opt-in"
    for name in ("api", "worker"):
        assert "profiles" not in services[name]


def test_compose_redis_is_redis_7_with_aof_and_noeviction(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    assert redis["image"].startswith("redis:7")
    mounts = {volume.split(":")[0]: volume.split(":")[1] for volume in redis["volumes"]}
    config_path = mounts["./deploy/redis.conf"]
    assert config_path in redis["command"]
    assert any(target == "/data" for target in mounts.values()), "AOF needs a volume"
    directives = redis_directives(REDIS_CONF)
    assert {key: directives.get(key) for key in REQUIRED_REDIS} == REQUIRED_REDIS


def test_compose_commands_exist_in_the_cli(compose: dict[str, Any]) -> None:
    for name, service in leasehold_services(compose):
        assert service["build"]["dockerfile"] == "deploy/Dockerfile", name
        assert (REPO_ROOT / service["build"]["context"] / "deploy/Dockerfile").is_file()
        resolve_cli(service["command"])


def test_compose_healthchecks_exist_and_probe_real_commands_and_routes(
    compose: dict[str, Any],
) -> None:
    for name, service in compose["services"].items():
        test = service["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL"), name
        if test[0] == "CMD":
            check_probe_command(test[1:])


def test_compose_env_names_are_settings_with_valid_values(compose: dict[str, Any]) -> None:
    problems = [
        problem
        for name, service in leasehold_services(compose)
        for problem in env_problems(service["environment"], f"compose service {name}")
    ]
    assert problems == []


def test_compose_grace_periods_outlast_the_drain(compose: dict[str, Any]) -> None:
    env = compose["services"]["worker"]["environment"]
    problems = [
        problem
        for name, service in compose["services"].items()
        for problem in grace_problems(duration_s(_literal(service["stop_grace_period"])), env, name)
    ]
    assert problems == []


def test_compose_api_port_is_the_port_the_api_listens_on(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    port = int(api["environment"].get("LEASEHOLD_API_PORT", dockerfile_env()["LEASEHOLD_API_PORT"]))
    published = [str(mapping).rsplit(":", 1)[-1] for mapping in api["ports"]]
    assert published == [str(port)]


def test_compose_gives_the_api_keys_to_the_api_only(compose: dict[str, Any]) -> None:
    assert "LEASEHOLD_API_KEYS" in compose["services"]["api"]["environment"]
    for name in ("worker", "reconciler"):
        assert "LEASEHOLD_API_KEYS" not in compose["services"][name]["environment"], name


def test_compose_services_wait_for_a_healthy_redis(compose: dict[str, Any]) -> None:
    for name, service in leasehold_services(compose):
        assert service["depends_on"]["redis"]["condition"] == "service_healthy", name


# --- deploy/Dockerfile ----------------------------------------------------------


def dockerfile_stages() -> list[list[str]]:
    """Instructions of each stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(stripped)
    return stages


def dockerfile_env() -> dict[str, str]:
    env = {}
    for instruction in dockerfile_stages()[-1]:
        if instruction.upper().startswith("ENV "):
            env.update(re.findall(r"([A-Z_][A-Z0-9_]*)=(\S+)", instruction))
    return env


def test_dockerfile_is_multi_stage_slim_non_root_with_leasehold_as_entrypoint() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    final = stages[-1]
    assert re.match(r"FROM python:\S+-slim\b", final[0])
    users = [line.split()[1] for line in final if line.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert 'ENTRYPOINT ["leasehold"]' in final
    exposed = [line.split()[1] for line in final if line.upper().startswith("EXPOSE ")]
    assert exposed == [dockerfile_env()["LEASEHOLD_API_PORT"]]


def test_the_final_image_installs_no_build_tools() -> None:
    final = " ".join(dockerfile_stages()[-1])
    for tool in ("apt-get install", "build-essential", "gcc", "pip wheel", "hatch"):
        assert tool not in final
    assert "COPY --from=build /opt/leasehold" in final, "only the built venv is copied"


def test_dockerfile_env_names_are_settings() -> None:
    assert env_problems(dockerfile_env(), "deploy/Dockerfile") == []


def test_the_wheel_ships_the_lua_scripts_the_image_runs() -> None:
    build = " ".join(dockerfile_stages()[0])
    assert "COPY scripts/lua ./scripts/lua" in build
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    force_include = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force_include["scripts/lua"] == "app/lua"
    assert pyproject["project"]["scripts"]["leasehold"] == "app.cli.launch:main"


def test_the_image_carries_its_scripts_spliced_once_at_build() -> None:
    # run by the venv's python with -P: the installed package writes its cache, not the
    # sources the build stage's working directory holds (its `app` would come first)
    build = " ".join(dockerfile_stages()[0])
    warm = re.search(r'/opt/leasehold/bin/python -P -c "([^"]+)"', build)
    assert warm is not None, "the build stage splices the scripts of the installed package"
    assert warm[1] == "from app.store.lua.scripts import load_scripts; load_scripts()"
    assert build.index("pip install --no-deps /wheels/") < build.index(warm[0])


# --- deploy/k8s -------------------------------------------------------------------


@pytest.fixture(scope="module")
def kustomization() -> dict[str, Any]:
    document: dict[str, Any] = load_yaml(K8S / "kustomization.yaml")
    return document


@pytest.fixture(scope="module")
def objects(kustomization: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for resource in kustomization["resources"]:
        for doc in load_documents(K8S / resource):
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def probe_commands(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in spec:
            yield kind, spec[kind]


def config_env(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = objects[("ConfigMap", "leasehold-config")]["data"]
    return data


def test_kustomization_lists_existing_files(kustomization: dict[str, Any]) -> None:
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file(), resource
    for generator in kustomization.get("configMapGenerator", []):
        for name in generator["files"]:
            assert (K8S / name).is_file(), name


def test_k8s_has_api_worker_service_pdb_config_and_secret(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    assert {
        ("Deployment", "leasehold-api"),
        ("Deployment", "leasehold-worker"),
        ("Service", "leasehold-api"),
        ("PodDisruptionBudget", "leasehold-worker"),
        ("ConfigMap", "leasehold-config"),
        ("Secret", "leasehold-secrets"),
    } <= set(objects)
    assert "LEASEHOLD_API_KEYS" in objects[("Secret", "leasehold-secrets")]["stringData"]
    assert "LEASEHOLD_API_KEYS" not in config_env(objects), "keys belong in the Secret"


def test_k8s_commands_and_exec_probes_exist_in_the_cli(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    for name in ("leasehold-api", "leasehold-worker"):
        spec = container(objects[("Deployment", name)])
        resolve_cli(spec["args"])
        for kind, probe in probe_commands(spec):
            if "exec" in probe:
                assert probe["exec"]["command"][0] == "leasehold", (name, kind)
                check_probe_command(probe["exec"]["command"])


def test_k8s_api_probes_readiness_and_liveness_on_real_routes(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    spec = container(objects[("Deployment", "leasehold-api")])
    readiness = spec["readinessProbe"]
    ready_path = readiness.get("httpGet", {}).get("path") or option_value(
        readiness["exec"]["command"], "--path"
    )
    assert ready_path == "/readyz"
    assert spec["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {ready_path, "/healthz"} <= route_paths()
    port_names = {port["name"] for port in spec["ports"]}
    assert spec["livenessProbe"]["httpGet"]["port"] in port_names


def test_k8s_workers_have_an_exec_liveness_probe(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    spec = container(objects[("Deployment", "leasehold-worker")])
    assert spec["livenessProbe"]["exec"]["command"] == ["leasehold", "probe", "worker"]


def test_k8s_ports_agree(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    spec = container(objects[("Deployment", "leasehold-api")])
    (port,) = spec["ports"]
    assert port["containerPort"] == int(config_env(objects)["LEASEHOLD_API_PORT"])
    service = objects[("Service", "leasehold-api")]["spec"]
    assert [p["targetPort"] for p in service["ports"]] in ([port["name"]], [port["containerPort"]])
    labels = objects[("Deployment", "leasehold-api")]["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= labels.items()


def test_k8s_grace_periods_outlast_the_drain(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    env = config_env(objects)
    problems = []
    for name in ("leasehold-api", "leasehold-worker"):
        pod = objects[("Deployment", name)]["spec"]["template"]["spec"]
        problems += grace_problems(float(pod["terminationGracePeriodSeconds"]), env, name)
    assert problems == []


def test_k8s_pdb_selects_the_worker_pods(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    pdb = objects[("PodDisruptionBudget", "leasehold-worker")]["spec"]
    worker = objects[("Deployment", "leasehold-worker")]["spec"]
    labels = worker["template"]["metadata"]["labels"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert pdb.get("maxUnavailable") == 1 or pdb.get("minAvailable")
    api_labels = objects[("Deployment", "leasehold-api")]["spec"]["template"]["metadata"]["labels"]
    assert not pdb["selector"]["matchLabels"].items() <= api_labels.items()


def test_k8s_env_names_are_settings_and_references_resolve(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    secret = objects[("Secret", "leasehold-secrets")]["stringData"]
    assert env_problems(config_env(objects), "ConfigMap leasehold-config") == []
    assert set(secret) <= SETTING_NAMES
    for name in ("leasehold-api", "leasehold-worker"):
        spec = container(objects[("Deployment", name)])
        for source in spec.get("envFrom", []):
            ref = source.get("configMapRef") or source.get("secretRef")
            kind = "ConfigMap" if "configMapRef" in source else "Secret"
            assert (kind, ref["name"]) in objects, (name, ref)
        for variable in spec.get("env", []):
            assert variable["name"] in SETTING_NAMES, (name, variable["name"])
            secret_ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if secret_ref:
                assert secret_ref["key"] in secret, (name, secret_ref)


def test_workers_do_not_receive_the_api_keys(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    spec = container(objects[("Deployment", "leasehold-worker")])
    assert not any("secretRef" in source for source in spec.get("envFrom", []))


def test_the_placeholder_api_key_is_refused_so_it_cannot_ship(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    placeholder = objects[("Secret", "leasehold-secrets")]["stringData"]["LEASEHOLD_API_KEYS"]
    with pytest.raises(Exception, match="LEASEHOLD_API_KEYS"):
        load_settings(api_keys=placeholder)


def test_k8s_redis_conf_matches_deploy_redis_conf_but_keeps_protected_mode() -> None:
    """Same settings; only compose's password-less Redis turns protected mode off."""
    directives = redis_directives(K8S_REDIS_CONF)
    compose_directives = redis_directives(REDIS_CONF)
    assert compose_directives.pop("protected-mode") == "no"
    assert directives == compose_directives
    assert {key: directives.get(key) for key in REQUIRED_REDIS} == REQUIRED_REDIS


# --- no manifest enables the demo handlers ------------------------------------------


def test_no_manifest_enables_the_demo_handlers(compose: dict[str, Any]) -> None:
    problems = demo_problems(dockerfile_env(), "deploy/Dockerfile")
    for name, service in leasehold_services(compose):
        problems += demo_problems(service["environment"], f"compose service {name}")
    for obj in rendered_objects():
        if obj["kind"] == "ConfigMap":
            problems += demo_problems(obj["data"], f"ConfigMap {obj['metadata']['name']}")
        for container in (
            obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        ):
            env = {v["name"]: v.get("value", "") for v in container.get("env", [])}
            problems += demo_problems(env, f"{obj['metadata']['name']}/{container['name']}")
    assert problems == []


def test_the_demo_check_catches_the_demo_among_other_modules() -> None:
    assert demo_problems({"LEASEHOLD_HANDLERS": "mine.handlers, app.demo"}, "x") != []
    assert demo_problems({"LEASEHOLD_HANDLERS": "app.demo.agent"}, "x") != []
    assert demo_problems({"LEASEHOLD_HANDLERS": "app.demolition"}, "x") == []


def test_compose_requires_the_users_handler_modules(compose: dict[str, Any]) -> None:
    """Unset LEASEHOLD_HANDLERS stops `docker compose` with a message, never a demo."""
    for name, service in leasehold_services(compose):
        value = service["environment"]["LEASEHOLD_HANDLERS"]
        match = REQUIRED_VARIABLE.fullmatch(value)
        assert match and match.group(1) == "LEASEHOLD_HANDLERS", (name, value)


def test_the_k8s_handler_placeholder_is_no_module_so_it_cannot_ship(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """A worker given the placeholder exits 2 naming LEASEHOLD_HANDLERS (see test_cli)."""
    modules = config_env(objects)["LEASEHOLD_HANDLERS"].split(",")
    for module in modules:
        with pytest.raises(ImportError):
            importlib.import_module(module.strip())


def test_the_placeholder_handlers_stop_a_real_worker_with_exit_2(
    objects: dict[tuple[str, str], dict[str, Any]], redis_url: str, tmp_path: Path
) -> None:
    """`leasehold worker` with the ConfigMap's handlers says what is wrong and exits 2."""
    env = {
        **os.environ,
        "LEASEHOLD_REDIS_URL": redis_url,
        "LEASEHOLD_HANDLERS": config_env(objects)["LEASEHOLD_HANDLERS"],
    }
    returncode, output = run_cli("worker", env=env, log_path=tmp_path / "worker.log")
    assert returncode == 2, output
    assert "LEASEHOLD_HANDLERS" in output


# --- compose publishes an unauthenticated API on loopback only -----------------------


def test_compose_publishes_the_api_on_loopback_only(compose: dict[str, Any]) -> None:
    assert compose["services"]["api"]["ports"] == ["127.0.0.1:8000:8000"]
    for name, service in compose["services"].items():
        if name != "api":
            assert "ports" not in service, f"{name} publishes a port"


def test_compose_public_override_publishes_only_with_keys(compose: dict[str, Any]) -> None:
    override = load_compose(COMPOSE_PUBLIC)
    assert set(override["services"]) == {"api"}
    api = override["services"]["api"]
    # `!override` replaces the loopback mapping instead of adding a second one
    assert api["ports"] == {"!override": ["8000:8000"]}
    match = REQUIRED_VARIABLE.fullmatch(api["environment"]["LEASEHOLD_API_KEYS"])
    assert match and match.group(1) == "LEASEHOLD_API_KEYS"
    base_keys = compose["services"]["api"]["environment"]["LEASEHOLD_API_KEYS"]
    assert base_keys == "${LEASEHOLD_API_KEYS:-}"


def test_redis_conf_is_accepted_by_redis_server(tmp_path: Path) -> None:
    """The file really starts a Redis with the required settings."""
    with redis_server(REDIS_CONF, tmp_path=tmp_path) as socket:
        client = redis.Redis(unix_socket_path=str(socket), decode_responses=True)
        config = {key: client.config_get(key)[key] for key in REQUIRED_REDIS}
        client.close()
    assert config == REQUIRED_REDIS


# variables compose reads that are no Leasehold setting (deploy/README.md documents them)
COMPOSE_ONLY_VARIABLES = {"LEASEHOLD_IMAGE", "LEASEHOLD_STOP_GRACE_PERIOD"}


def test_compose_runs_the_image_a_variable_names_and_reads_the_env_file(
    compose: dict[str, Any],
) -> None:
    """Your own image (FROM this one, with your handlers) and your .env reach every service."""
    for name, service in leasehold_services(compose):
        assert service["image"] == "${LEASEHOLD_IMAGE:-leasehold:local}", name
        assert service["env_file"] == [{"path": ".env", "required": False}], name


def test_every_variable_compose_reads_is_a_setting_of_env_example_or_documented() -> None:
    text = COMPOSE.read_text()
    used = set(re.findall(r"\$\{(LEASEHOLD_[A-Z0-9_]+)", text))
    example = (REPO_ROOT / ".env.example").read_text()
    settings = set(re.findall(r"^#?\s*(LEASEHOLD_[A-Z0-9_]+)=", example, re.M))
    deploy_readme = (REPO_ROOT / "deploy" / "README.md").read_text()
    assert used - COMPOSE_ONLY_VARIABLES <= settings
    for variable in COMPOSE_ONLY_VARIABLES:
        assert variable in used and f"`{variable}`" in deploy_readme, variable
