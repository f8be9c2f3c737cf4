"""The deployment the chaos harness attacks: Redis with AOF, API processes, workers.

Everything is a real process on loopback: one ``redis-server`` (AOF on, so a
restart keeps every acknowledged write), ``apis`` API servers on fixed ports
(a killed one is restarted on the same port, as a supervisor would) and
``workers`` worker slots. Each worker slot reaches Redis through its own
:class:`~tools.chaos.proxy.BlackholeProxy`, so the harness can partition one
worker from Redis while everything else keeps talking to it. A worker that dies
or drains is replaced in its slot, behind the same proxy, with a new owner id.

Every process logs to its own file under ``work_dir/logs``; the checker reads
the stale processes' logs to count the writes Redis rejected.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.stack.embedded import EmbeddedRedis, free_port
from app.stack.processes import CLI_MODULE, Child, child_env, spawn, wait_healthy
from tools.chaos.proxy import BlackholeProxy

REPO_ROOT = Path(__file__).resolve().parents[2]
CHAOS_HANDLERS = "app.demo,tools.chaos.handlers"
LUA_DIR_ENV = "CHAOS_LUA_DIR"
START_TIMEOUT_S = 60.0
OWNER_LINE = re.compile(r"worker (\S+) serving queues")


@dataclass(frozen=True)
class ClusterConfig:
    """Shape and timing of the deployment."""

    workers: int = 4
    apis: int = 2
    lease_ttl_s: float = 2.0
    concurrency: int = 8
    drain_timeout_s: float = 1.5
    # a directory of (deliberately broken) Lua scripts the workers load instead of
    # scripts/lua: only the harness self-test sets it
    lua_dir: Path | None = None

    @property
    def reconcile_interval_s(self) -> float:
        """The reconcilers' scan period (the default: TTL/3)."""
        return self.lease_ttl_s / 3


@dataclass
class Process(Child):
    """A child process; a worker also knows the owner id it announced."""

    owner_id: str | None = None


@dataclass
class Slot:
    """A place for one process; ``history`` has every process that occupied it."""

    index: int
    current: Process | None = None
    history: list[Process] = field(default_factory=list)

    def occupy(self, process: Process) -> Process:
        """Make ``process`` the slot's current one."""
        self.current = process
        self.history.append(process)
        return process


@dataclass(kw_only=True)
class WorkerSlot(Slot):
    """A worker's place, behind its own proxy to Redis."""

    proxy: BlackholeProxy


@dataclass(kw_only=True)
class ApiSlot(Slot):
    """An API server's place, on a fixed port."""

    port: int

    @property
    def url(self) -> str:
        """Its base URL."""
        return f"http://127.0.0.1:{self.port}"


class Cluster:
    """Starts, attacks (through :mod:`tools.chaos.faults`) and stops the deployment."""

    def __init__(self, config: ClusterConfig, *, work_dir: Path, prefix: str) -> None:
        self.config = config
        self.prefix = prefix
        self.side_dir = work_dir / "side"
        self.log_dir = work_dir / "logs"
        self.redis = EmbeddedRedis(
            data_dir=work_dir / "redis", appendonly=True, log_file=work_dir / "redis.log"
        )
        self.workers: list[WorkerSlot] = []
        self.apis: list[ApiSlot] = []

    @property
    def redis_url(self) -> str:
        """Redis, directly (the APIs and the harness use it; workers go through proxies)."""
        return self.redis.url

    @property
    def api_urls(self) -> list[str]:
        """Every API's base URL."""
        return [slot.url for slot in self.apis]

    def start(self) -> None:
        """Redis, then the APIs and workers; returns once all of them serve."""
        self.side_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.redis.start()
        self.apis = [ApiSlot(i, port=free_port()) for i in range(self.config.apis)]
        for api in self.apis:
            self.start_api(api)
        for i in range(self.config.workers):
            slot = WorkerSlot(i, proxy=BlackholeProxy(self.redis.port).start())
            self.workers.append(slot)
            self.start_worker(slot)

    def stop(self) -> None:
        """Kill every child (waking paused ones first), the proxies, then Redis."""
        for process in self.all_processes():
            process.kill()
        for slot in self.workers:
            slot.proxy.stop()
        self.redis.stop()

    def all_processes(self) -> list[Process]:
        """Every process ever started, dead or alive."""
        return [p for slot in [*self.apis, *self.workers] for p in slot.history]

    def worker_processes(self) -> list[Process]:
        """Every worker process ever started."""
        return [p for slot in self.workers for p in slot.history]

    def start_worker(self, slot: WorkerSlot, build_id: str | None = None) -> Process:
        """Start a worker in ``slot`` (behind its proxy); returns once it serves.

        ``build_id``: its LEASEHOLD_BUILD_ID (a deploy fault's); none: the hash of its
        handler modules, the same for every worker of this code."""
        env = {"LEASEHOLD_REDIS_URL": slot.proxy.url}
        if build_id is not None:
            env["LEASEHOLD_BUILD_ID"] = build_id
        module = CLI_MODULE
        if self.config.lua_dir is not None:
            module = "tools.chaos.broken"
            env[LUA_DIR_ENV] = str(self.config.lua_dir)
        name = f"worker{slot.index}-{len(slot.history)}"
        process = slot.occupy(self._spawn(name, module, ["worker"], env))
        process.owner_id = _wait_for_owner_id(process)
        return process

    def start_api(self, slot: ApiSlot) -> Process:
        """Start an API on the slot's port; returns once it answers /healthz."""
        env = {"LEASEHOLD_REDIS_URL": self.redis_url, "LEASEHOLD_SSE_KEEPALIVE_S": "2"}
        name = f"api{slot.index}-{len(slot.history)}"
        process = slot.occupy(self._spawn(name, CLI_MODULE, ["api", "--port", str(slot.port)], env))
        wait_healthy(slot.url, process, timeout_s=START_TIMEOUT_S)
        return process

    def _spawn(self, name: str, module: str, args: list[str], extra: dict[str, str]) -> Process:
        env = child_env(self._base_env(), extra, {"PYTHONPATH": str(REPO_ROOT)})
        # own process group: a Ctrl-C of `make soak` reaches the harness only, and the
        # harness alone decides which signal each child gets
        child = spawn(
            name,
            args,
            env=env,
            log_path=self.log_dir / f"{name}.log",
            module=module,
            cwd=REPO_ROOT,
            process_group=True,
        )
        return Process(child.name, child.popen, child.log_path)

    def _base_env(self) -> dict[str, str]:
        config = self.config
        return {
            "LEASEHOLD_PREFIX": self.prefix,
            "LEASEHOLD_LEASE_TTL_S": str(config.lease_ttl_s),
            "LEASEHOLD_HANDLERS": CHAOS_HANDLERS,
            "LEASEHOLD_CONCURRENCY": str(config.concurrency),
            "LEASEHOLD_DRAIN_TIMEOUT_S": str(config.drain_timeout_s),
            "LEASEHOLD_RETRY_BACKOFF_S": "0.2",
            "LEASEHOLD_RETRY_BACKOFF_MAX_S": "1",
            "LEASEHOLD_IDLE_WAKE_S": "1",
            "LEASEHOLD_WATCHDOG_EVALUATOR": "tools.chaos.handlers:judge",
            "LEASEHOLD_WATCHDOG_FREE_RENEWALS": "0",
            "LEASEHOLD_LOG_LEVEL": "INFO",
            "CHAOS_SIDE_DIR": str(self.side_dir),
        }


def _wait_for_owner_id(process: Process) -> str:
    """The owner id a worker announces once it is connected and serving."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        match = OWNER_LINE.search(process.log())
        if match:
            return match[1]
        if not process.alive():
            raise RuntimeError(f"{process.name} exited early:\n{process.log()}")
        time.sleep(0.05)
    raise RuntimeError(f"{process.name} did not start serving:\n{process.log()}")
