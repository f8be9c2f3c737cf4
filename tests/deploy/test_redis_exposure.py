"""Kubernetes: Redis is reachable only through the NetworkPolicy and only with a password.

Read from the rendered kustomization (``kubectl kustomize``: what ``apply -k``
sends), then proven on a real redis-server started with deploy/k8s/redis.conf and
the StatefulSet's own arguments: a client without the password is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.deploy.files import (
    COMPOSE,
    K8S_REDIS_CONF,
    REDIS_CONF,
    Object,
    find,
    load_compose,
    pod_templates,
    redis_directives,
    redis_server,
    rendered_objects,
)

REDIS_PORT = 6379
LEASEHOLD_COMPONENTS = {"api", "worker", "reconciler"}


@pytest.fixture(scope="module")
def objects() -> list[Object]:
    return rendered_objects()


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels and the four operators)."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def labels_of(template: Object) -> dict[str, str]:
    labels: dict[str, str] = template["metadata"]["labels"]
    return labels


def redis_container(objects: list[Object]) -> Object:
    (container,) = find(objects, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"]
    return container


def secret_value(objects: list[Object], name: str, key: str) -> str:
    value: str = find(objects, "Secret", name)["stringData"][key]
    return value


def test_a_network_policy_admits_only_leasehold_pods_to_redis(objects: list[Object]) -> None:
    templates = pod_templates(objects)
    redis_labels = labels_of(templates["StatefulSet/redis"])
    policies = [
        o
        for o in objects
        if o["kind"] == "NetworkPolicy" and selects(o["spec"]["podSelector"], redis_labels)
    ]
    assert policies, "no NetworkPolicy selects the Redis pods: the whole cluster reaches them"
    admitted: set[str] = set()
    for policy in policies:
        spec = policy["spec"]
        assert "Ingress" in spec["policyTypes"], "a policy without Ingress denies nothing"
        for rule in spec.get("ingress", []):
            # a rule with no `from` admits every source; ipBlock / namespaceSelector admit
            # pods or addresses outside this namespace
            assert rule.get("from"), f"{policy['metadata']['name']}: a rule open to everyone"
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"}, peer
                admitted |= {
                    name
                    for name, template in templates.items()
                    if selects(peer["podSelector"], labels_of(template))
                }
            assert [p["port"] for p in rule["ports"]] == [REDIS_PORT]
    assert admitted == {"Deployment/leasehold-api", "Deployment/leasehold-worker"}
    for name in admitted:
        component = labels_of(templates[name])["app.kubernetes.io/component"]
        assert component in LEASEHOLD_COMPONENTS


def test_a_standalone_reconciler_pod_is_admitted_and_an_unrelated_pod_is_not(
    objects: list[Object],
) -> None:
    (peer,) = find(objects, "NetworkPolicy", "redis")["spec"]["ingress"][0]["from"]
    selector = peer["podSelector"]
    leasehold = {"app.kubernetes.io/name": "leasehold"}
    assert selects(selector, {**leasehold, "app.kubernetes.io/component": "reconciler"})
    assert not selects(selector, {**leasehold, "app.kubernetes.io/component": "debug"})
    assert not selects(selector, {"app.kubernetes.io/component": "worker"})
    assert not selects(selector, {})


def test_redis_is_not_published_outside_the_cluster(objects: list[Object]) -> None:
    service = find(objects, "Service", "redis")["spec"]
    assert service.get("type", "ClusterIP") == "ClusterIP"
    pod = find(objects, "StatefulSet", "redis")["spec"]["template"]["spec"]
    assert not pod.get("hostNetwork")
    assert all("hostPort" not in port for port in redis_container(objects)["ports"])


def test_redis_requires_the_password_of_the_secret_the_app_url_carries(
    objects: list[Object],
) -> None:
    container = redis_container(objects)
    args = container["args"]
    password_arg = args[args.index("--requirepass") + 1]
    assert password_arg == "$(REDIS_PASSWORD)", "the password comes from the env, not the file"
    env = {variable["name"]: variable for variable in container["env"]}
    ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    password = secret_value(objects, ref["name"], ref["key"])
    assert password
    url = urlsplit(secret_value(objects, "leasehold-secrets", "LEASEHOLD_REDIS_URL"))
    assert url.hostname == "redis"
    assert unquote(url.password or "") == password, "LEASEHOLD_REDIS_URL lacks Redis's password"
    # the readiness probe's redis-cli authenticates with the same secret
    assert env["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"] == ref


def test_k8s_redis_keeps_protected_mode_on() -> None:
    assert redis_directives(K8S_REDIS_CONF).get("protected-mode", "yes") == "yes"


def test_every_container_is_hardened_like_the_app_pods(objects: list[Object]) -> None:
    problems = []
    for name, template in pod_templates(objects).items():
        pod = template["spec"]
        if not pod["securityContext"].get("runAsNonRoot"):
            problems.append(f"{name}: may run as root")
        if pod["securityContext"].get("seccompProfile", {}).get("type") != "RuntimeDefault":
            problems.append(f"{name}: no RuntimeDefault seccomp profile")
        if pod.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: mounts a service-account token")
        for container in pod["containers"]:
            context = container.get("securityContext", {})
            if context.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{name}/{container['name']}: privilege escalation allowed")
            if context.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{name}/{container['name']}: writable root filesystem")
            if context.get("capabilities", {}).get("drop") != ["ALL"]:
                problems.append(f"{name}/{container['name']}: keeps capabilities")
    assert problems == []


def test_a_real_redis_with_the_k8s_config_refuses_clients_without_the_password(
    objects: list[Object], tmp_path: Path
) -> None:
    """deploy/k8s/redis.conf plus the StatefulSet's args, in a real redis-server."""
    password = secret_value(objects, "redis-auth", "password")
    args = [password if a == "$(REDIS_PASSWORD)" else a for a in redis_container(objects)["args"]]
    assert args[:2] == ["redis-server", "/usr/local/etc/redis/redis.conf"]
    # no retries: a refusal is the answer, not a hiccup to retry through
    once = Retry(NoBackoff(), 0)
    with redis_server(K8S_REDIS_CONF, *args[2:], tmp_path=tmp_path) as socket:
        anonymous = redis.Redis(unix_socket_path=str(socket), retry=once)
        with pytest.raises(redis.AuthenticationError):
            anonymous.ping()
        with pytest.raises(redis.AuthenticationError):
            anonymous.set("stolen", "1")
        anonymous.close()
        wrong = redis.Redis(unix_socket_path=str(socket), password=f"not-{password}", retry=once)
        with pytest.raises(redis.AuthenticationError):
            wrong.ping()
        wrong.close()
        client = redis.Redis(unix_socket_path=str(socket), password=password)
        assert client.ping() is True
        assert client.config_get("protected-mode") == {"protected-mode": "yes"}
        assert client.dbsize() == 0, "the refused write left nothing behind"
        client.close()


# --- maxmemory below the container limit (issue 13 item 3) --------------------------

# Kubernetes quantities and docker's mem_limit suffixes, in bytes
QUANTITY_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9}
DOCKER_UNITS = {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def maxmemory_as_redis_reads_it(config: Path, tmp_path: Path) -> int:
    """The maxmemory a real redis-server takes from ``config`` (its own unit parsing)."""
    tmp_path.mkdir()
    with redis_server(config, tmp_path=tmp_path) as socket:
        client = redis.Redis(unix_socket_path=str(socket))
        try:
            return int(client.config_get("maxmemory")["maxmemory"])
        finally:
            client.close()


def quantity_bytes(quantity: str) -> int:
    for suffix, factor in QUANTITY_UNITS.items():
        if quantity.endswith(suffix):
            return int(quantity.removesuffix(suffix)) * factor
    return int(quantity)


def docker_bytes(limit: str) -> int:
    suffix = limit[-1].lower()
    return int(limit[:-1]) * DOCKER_UNITS[suffix] if suffix in DOCKER_UNITS else int(limit)


def test_every_shipped_redis_stops_at_a_maxmemory_below_its_container_limit(
    objects: list[Object], tmp_path: Path
) -> None:
    """Redis must refuse writes (creates get 503 first) before the kernel kills it.

    Without a maxmemory, or with one at the container limit, the OOM killer ends
    Redis mid-write instead; the headroom covers buffers, forks and fragmentation.
    """
    k8s_limit = quantity_bytes(redis_container(objects)["resources"]["limits"]["memory"])
    k8s_max = maxmemory_as_redis_reads_it(K8S_REDIS_CONF, tmp_path / "k8s")
    assert 0 < k8s_max <= 0.8 * k8s_limit, (k8s_max, k8s_limit)
    compose_limit = docker_bytes(str(load_compose(COMPOSE)["services"]["redis"]["mem_limit"]))
    compose_max = maxmemory_as_redis_reads_it(REDIS_CONF, tmp_path / "compose")
    assert 0 < compose_max <= 0.8 * compose_limit, (compose_max, compose_limit)
