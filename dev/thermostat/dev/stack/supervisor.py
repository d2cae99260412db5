"""The whole stack on one machine: Postgres, the RunPod simulator, every service and the Envoy edge.

`demo_backends` (POOL_DEMO_BACKENDS=docker,fly,runpod) also starts the Docker Engine and Fly Machines
simulators (POOL_DEMO_DOCKER=daemon: the docker type on the real daemon instead, stack.docker_daemon) and points the
pool's backend settings at them (POOL_DOCKER_SOCKET; FLY_API_TOKEN, POOL_FLY_APP,
POOL_FLY_REGION, POOL_FLY_BASE_URL, POOL_FLY_ENDPOINT_TEMPLATE); `runpod` makes the RunPod simulator run the
reference worker in every image pod (`--machines`), the pool reaching it through the simulated pod proxy. Each
simulated machine is a real reference-worker process; the simulators kill theirs when they stop.

Used by `make run` (python -m thermostat.dev.stack) and by the end-to-end tests. Each child runs in its own
session, so Ctrl-C reaches only this process, which then stops the children in reverse order (edge first,
Postgres last) and waits for each: nothing is left behind. A pool dispatcher is stopped with SIGINT, which stops
its machines; a SIGTERM to it alone is a deploy, and the dispatcher started again adopts its warm machines
(`leaving_signal`; docs/pool-deploys.md). Children's log lines are relayed with the
child's name in front.

Once the stack is up, a child that exits (a crash, a kill -9) is reported and started again after a backoff
that doubles from 1 s to 30 s and starts over once a child has stayed up for a minute, as a compose restart
policy would: the stack never runs on silently without a service.

`replicas` runs each service as that many processes on one database (the chaos suite kills one of two); the
other services reach all of them through one gRPC target listing every replica (`ipv4:host:a,host:b`), whose
pick-first policy moves to the next address when one stops answering, as a cluster Service would.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.registry import POOL_DISPATCHER, SERVICES, ServiceDef, reflecting
from thermostat.dev.embedded_postgres import EmbeddedPostgres
from thermostat.dev.envoy import EnvoyProcess, start_envoy
from thermostat.dev.images import WORKER_IMAGE
from thermostat.dev.stack.docker_daemon import check_daemon, remove_pool_containers
from thermostat.dev.stack.lock import DataDirLock
from thermostat.dev.stack.ports import WantedPort, busy_ports, free_port_except, in_use
from thermostat.dev.stack.relay import NAME_WIDTH, human
from thermostat.providers.pool.docker import docker_socket_path
from thermostat.providers.pool.settings import ALIASES, env_setting
from thermostat.store.db import apply_migrations
from tools.envoy_config import STATS_PATH, EdgeSpec, edge_tracing_from_env, upstreams, write_envoy_config

log = logging.getLogger("thermostat.dev.stack")

ROOT = Path(__file__).resolve().parents[4]  # dev/thermostat/dev/stack/ → the repository
SIMULATOR_API_KEY = "sim-key-not-a-secret"  # the simulator checks a bearer like the real API does
DEMO_TIMINGS = {
    "RUNPOD_WAKE_POLL_SECONDS": "2",
    "CHECK_SECONDS": "10",
    "IDLE_MINUTES": "2",
    "RUNPOD_BOOT_GRACE_MINUTES": "3",
}


DEMO_BACKENDS = ("docker", "fly", "runpod")
FLY_DEMO_APP = "thermostat-pool"
FLY_DEMO_TOKEN = "sim-fly-token"  # noqa: S105 - the Fly simulator's fixed development token


def set_seed_setting(env: dict[str, str], name: str, value: str) -> None:
    """Point a pool setting at a simulator under the seed's name, dropping its alias (which would differ)."""
    env[name] = value
    env.pop(ALIASES[name], None)


DEV_ENABLED_BACKENDS = "local,docker,runpod,fly"
"""The backends the stack's pool may use unless POOL_ENABLED_BACKENDS says otherwise: every one, local included."""


def demo_backends_from(value: str | None) -> tuple[str, ...]:
    """POOL_DEMO_BACKENDS: a comma-separated subset of docker, fly, runpod (empty: none)."""
    names = tuple(dict.fromkeys(part.strip().lower() for part in (value or "").split(",") if part.strip()))
    unknown = [name for name in names if name not in DEMO_BACKENDS]
    if unknown:
        raise ValueError(f"POOL_DEMO_BACKENDS: {', '.join(unknown)} is not one of {', '.join(DEMO_BACKENDS)}")
    return names


ENGINES = ("simulated", "vllm")


def engine_from(value: str | None) -> str:
    """ENGINE (`make run ENGINE=vllm`): what answers behind each simulated pod's proxy — the simulator's canned
    engine (unset or empty), or a real vLLM per RUNNING pod (thermostat.dev.engine, installed on first use)."""
    engine = (value or "").strip().lower() or "simulated"
    if engine not in ENGINES:
        raise ValueError(f"ENGINE: {value!r} is not one of {', '.join(ENGINES)}")
    return engine


EDGE_CONCURRENCY = 1
"""Envoy's worker threads in the dev stack (EDGE_CONCURRENCY): one, as the Kubernetes edge and the benches run it
(tools/k8s_manifests.py EDGE_WORKERS), rather than Envoy's default of one per hardware thread."""


def edge_concurrency_from(value: str | None) -> int:
    """EDGE_CONCURRENCY: Envoy's worker threads, a whole number of at least 1 (unset or empty: the default)."""
    if value is None or not value.strip():
        return EDGE_CONCURRENCY
    try:
        workers = int(value.strip())
    except ValueError:
        workers = 0
    if workers < 1:
        raise ValueError(f"EDGE_CONCURRENCY: {value!r} is not a whole number of at least 1")
    return workers


RESTART_FIRST_DELAY = 1.0
RESTART_MAX_DELAY = 30.0
RESTART_STEADY_SECONDS = 60.0  # a child up this long restarts after the first delay again
LAST_LINES = 20  # of each child's output, kept to say why it died


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    argv: list[str] = field(default_factory=list)
    env: Mapping[str, str] = field(default_factory=dict)
    relay: asyncio.Task[None] | None = None
    port: int | None = None  # a service's gRPC port; None for the simulators
    started: float = field(default_factory=time.monotonic)
    restarts: int = 0  # in a row, since it last stayed up RESTART_STEADY_SECONDS (the one after that counted)
    # its last output lines, relayed or not: why a child that died while the stack started did (a test's stack
    # relays nothing, and "exited with status 1" alone left a CI failure unexplained)
    last_lines: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=LAST_LINES))


POOL_LOCAL_OUTLIVE_ENV = "POOL_LOCAL_MACHINES_OUTLIVE_PROCESS"


def leaving_signal(child_name: str) -> signal.Signals:
    """The signal the stack's own stop sends a child: SIGINT to a pool dispatcher (the whole stack goes away, so
    its machines stop: thermostat.policy.pool.departure), SIGTERM to the rest (a SIGTERM to a pool dispatcher alone
    is a deploy: it releases its machines to the process that follows)."""
    return signal.SIGINT if child_name.split("#")[0] == POOL_DISPATCHER.name else signal.SIGTERM


def restart_delay(restarts: int, uptime: float) -> float:
    """How long to wait before starting a child again that exited after `uptime` seconds, `restarts` restarts
    in a row before this one."""
    if uptime >= RESTART_STEADY_SECONDS:
        return RESTART_FIRST_DELAY
    return min(RESTART_MAX_DELAY, RESTART_FIRST_DELAY * 2.0 ** min(restarts, 16))


def restarts_in_a_row(restarts: int, uptime: float) -> int:
    """This restart's place in its streak (what the log line says): a child that stayed up
    RESTART_STEADY_SECONDS starts a new streak at 1, as one that dies right after the stack came up does."""
    return 1 if uptime >= RESTART_STEADY_SECONDS else restarts + 1


def exit_description(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
        return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def children_env(environ: Mapping[str, str], extra: Mapping[str, str], database_url: str) -> dict[str, str]:
    """What every child of the stack starts with: `environ` and `extra`, the database, and the stack's defaults."""
    env = {**environ, **extra, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    # the demo types run the reference worker as a local child process: the stack enables local explicitly,
    # which a deployment does not (POOL_ENABLED_BACKENDS, issue 23)
    env.setdefault("POOL_ENABLED_BACKENDS", DEV_ENABLED_BACKENDS)
    # a pool dispatcher this stack restarts (a crash, a SIGTERM to it alone) keeps its local machines: they
    # outlive it and the next process adopts them; the stack's own stop sends it SIGINT, which stops them
    env.setdefault(POOL_LOCAL_OUTLIVE_ENV, "true")
    # no child forks but to exec (the local backend's launcher: the C fork path, tests/integration/pool_dispatcher/
    # test_processes.py), so none needs gRPC's fork handlers, whose "skipping fork() handlers" line (fork_posix.cc)
    # printed at every local machine start (issue 35)
    env.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    return env


@dataclass(kw_only=True)
class StackConfig:
    data_dir: Path = ROOT / ".data"
    database_url: str | None = None  # None: the embedded server under data_dir/pg
    runpod_base_url: str | None = None  # None and no API key: the simulator
    runpod_api_key: str | None = None
    edge_port: int = 8080
    admin_port: int = 9901  # 0: a free one (the stats listener needs it known when the config is written)
    stats_port: int = 9902  # the edge's Prometheus stats listener; 0: a free one
    simulator_port: int = 9100
    service_ports: Mapping[str, int] = field(default_factory=dict)
    metrics_ports: Mapping[str, int] = field(default_factory=dict)  # each service's /metrics; absent or 0: free
    services: Sequence[ServiceDef] = SERVICES
    extra_env: Mapping[str, str] = field(default_factory=dict)
    simulator_args: Sequence[str] = ()
    engine: str = "simulated"  # "vllm": each simulated pod runs a real vLLM (engine_from)
    demo_backends: Sequence[str] = ()  # docker, fly, runpod: the pool's provider simulators (module doc)
    demo_docker: str = "simulator"  # "daemon": the docker demo type on the real daemon (stack.docker_daemon)
    relay_logs: bool = True
    human_logs: bool = False  # relayed lines as short human ones (stack.relay: make run on a terminal)
    durable_db: bool = True
    replicas: int = 1  # processes per service (module doc)
    restart_children: bool = True  # False: a child that exits stays down (a test kills one and watches the rest)
    edge: bool = True
    edge_concurrency: int = EDGE_CONCURRENCY  # Envoy's --concurrency


class Stack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.children: list[Child] = []
        self.postgres: EmbeddedPostgres | None = None
        self.envoy: EnvoyProcess | None = None
        self.database_url = ""
        self.env: dict[str, str] = {}
        self.ports: dict[str, int] = {}  # each service's first replica
        self.replica_ports: dict[str, list[int]] = {}
        self.metrics_ports: dict[str, int] = {}
        self.edge_stats_url = ""
        self.edge_admin_url = ""
        self.simulator_url: str | None = None
        self.demo_urls: dict[str, str] = {}
        self.docker_daemon: tuple[str, str] | None = None  # (socket, pool name) under POOL_DEMO_DOCKER=daemon
        self.edge_url = ""
        self._stopping = asyncio.Event()
        self._watchers: list[asyncio.Task[None]] = []
        # the embedded server's start, in a thread: kept so a stop waits for it (a thread cannot be cancelled)
        self._postgres_starting: asyncio.Future[str] | None = None
        self._lock = DataDirLock(config.data_dir)

    # ---------------------------------------------------------------------------------------------- start

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    def wanted_ports(self) -> list[WantedPort]:
        """Every fixed port this stack will listen on (0 is a free one, chosen as each part starts)."""
        cfg = self.config
        wanted = []
        if cfg.edge:
            wanted += [
                WantedPort(port=cfg.edge_port, part="the edge, REST + gRPC", setting="EDGE_PORT"),
                WantedPort(port=cfg.admin_port, part="Envoy's admin interface", setting="EDGE_ADMIN_PORT"),
                WantedPort(port=cfg.stats_port, part="the edge's stats listener", setting="EDGE_STATS_PORT"),
            ]
        if not cfg.runpod_base_url and not cfg.runpod_api_key:
            wanted.append(
                WantedPort(port=cfg.simulator_port, part="the RunPod simulator", setting="RUNPOD_SIMULATOR_PORT")
            )
        for service in cfg.services:
            if service.http_port_env:
                wanted.append(
                    WantedPort(
                        port=cfg.service_ports.get(f"{service.name}-http", 0),
                        part=f"{service.name}'s HTTP API",
                        setting=service.http_port_env,
                    )
                )
            wanted += [
                WantedPort(port=cfg.service_ports.get(service.name, 0), part=service.name, setting=service.port_env),
                WantedPort(
                    port=cfg.metrics_ports.get(service.name, 0),
                    part=f"{service.name}'s metrics",
                    setting=service.metrics_port_env,
                ),
            ]
        return wanted

    def _free_port(self) -> int:
        """A free port none of the stack's fixed ones: the OS may offer one of those until its part binds it."""
        return free_port_except({want.port for want in self.wanted_ports() if want.port})

    async def _start(self) -> None:
        cfg = self.config
        started = time.monotonic()
        self._lock.acquire()  # before the port check: "another make run" says more than "port 8080 is in use"
        busy = busy_ports(self.wanted_ports())
        if busy:  # said before anything starts, rather than as one part's traceback after the rest came up
            raise RuntimeError("\n  ".join(busy))
        if cfg.database_url:
            self.database_url = cfg.database_url
        else:
            # Shielded and kept: a start cancelled meanwhile (Ctrl-C during initdb) cannot stop the thread, which
            # goes on to launch the server; stop() waits for it and stops that server instead of leaving it behind.
            self._postgres_starting = asyncio.get_running_loop().run_in_executor(None, self._start_postgres)
            self.database_url = await asyncio.shield(self._postgres_starting)
        applied = await apply_migrations(self.database_url)
        log.info("store ready (%d migration(s) applied)", len(applied))

        env = children_env(os.environ, cfg.extra_env, self.database_url)
        if not env.get(INTERNAL_TOKEN_ENV):
            # one token for the whole stack, minted per run: the services' internal calls authenticate with it
            env[INTERNAL_TOKEN_ENV] = secrets.token_urlsafe(32)
            log.info("%s minted for this run and given to every service", INTERNAL_TOKEN_ENV)
        if cfg.runpod_base_url:
            env["RUNPOD_V2_BASE_URL"] = cfg.runpod_base_url
            log.info("RunPod: %s (RUNPOD_V2_BASE_URL); no simulator started", cfg.runpod_base_url)
            if not cfg.runpod_api_key:
                # the safe boot before the secret: everything comes up, nothing reaches RunPod (docs/deployment.md)
                log.info("RUNPOD_API_KEY is unset: every pod is disabled until configured")
        elif cfg.runpod_api_key:
            log.info("RunPod: the real API (RUNPOD_API_KEY set, no RUNPOD_V2_BASE_URL)")
        else:
            await self._start_simulator(env)
        if cfg.runpod_api_key:
            env["RUNPOD_API_KEY"] = cfg.runpod_api_key
        await self._start_demo_backends(env)

        for service in cfg.services:
            first = cfg.service_ports.get(service.name) or self._free_port()
            ports = [first, *(self._free_port() for _ in range(cfg.replicas - 1))]
            self.ports[service.name], self.replica_ports[service.name] = first, ports
            env[service.port_env] = str(first)
            if service.http_port_env:  # its own HTTP API (the gateway's): one port per replica, the edge on the first
                http = cfg.service_ports.get(f"{service.name}-http") or self._free_port()
                http_ports = [http, *(self._free_port() for _ in range(cfg.replicas - 1))]
                self.ports[f"{service.name}-http"], self.replica_ports[f"{service.name}-http"] = http, http_ports
            metrics_port = cfg.metrics_ports.get(service.name) or self._free_port()
            self.metrics_ports[service.name] = metrics_port
            env[service.metrics_port_env] = str(metrics_port)
        # where services reach each other (POD_CONTROLLER_ADDR), unless configured; a service this stack does not
        # run gets no address (METERING_ADDR set would make every wake wait for a metering that never comes)
        for service in cfg.services:
            ports = self.replica_ports[service.name]
            every = "ipv4:" + ",".join(service.address(port=p) for p in ports) if len(ports) > 1 else None
            env.setdefault(service.address_env, every or service.address(port=ports[0]))
        self.env = env
        services = []
        for service in cfg.services:
            for index, port in enumerate(self.replica_ports[service.name]):
                name = service.name if index == 0 else f"{service.name}#{index + 1}"
                argv = [sys.executable, "-m", service.package]
                own = {service.port_env: str(port)}
                if service.http_port_env:
                    own[service.http_port_env] = str(self.replica_ports[f"{service.name}-http"][index])
                if index:  # the first replica serves /metrics where the summary says; the others on free ports
                    own[service.metrics_port_env] = str(self._free_port())
                child = await self._spawn(name, argv, {**env, **own}, port=port)
                services.append((service, child))
        await asyncio.gather(*(self.wait_serving(c, s) for s, c in services))

        if cfg.edge:
            await self._start_edge()
        if cfg.restart_children:
            self._watchers = [
                asyncio.create_task(self._keep_running(c), name=f"keep {c.name} running") for c in self.children
            ]
        log.info("stack up in %.1fs", time.monotonic() - started)

    def _start_postgres(self) -> str:
        self.postgres = EmbeddedPostgres(
            self.config.data_dir / "pg",
            durable=self.config.durable_db,
            avoid_ports={want.port for want in self.wanted_ports() if want.port},
        )
        self.postgres.start()
        # Every process of the stack runs on this host as this user: the Unix socket, cheaper per statement
        # than TCP loopback, where the data directory's path allows one.
        socket = f", socket in {self.postgres.socket_dir}" if self.postgres.socket_dir else ""
        log.info(
            "embedded Postgres on 127.0.0.1:%d%s (data in %s)",
            self.postgres.port,
            socket,
            self.postgres.data_dir,
        )
        return self.postgres.local_dsn

    async def _start_simulator(self, env: dict[str, str]) -> None:
        port = self.config.simulator_port or self._free_port()
        base = f"http://127.0.0.1:{port}"
        await self._spawn(
            "runpod-sim",
            [
                sys.executable,
                "-m",
                "thermostat.dev.simulators.runpod",
                "--port",
                str(port),
                "--api-key",
                SIMULATOR_API_KEY,
                *(["--machines"] if "runpod" in self.config.demo_backends else []),
                *self._engine_args(),
                # its pods outlive a restart of the stack, as RunPod's do (issue 35): a pod on the record stays
                "--state-file",
                str(self.config.data_dir / "runpod-simulator.json"),
                *self.config.simulator_args,
            ],
            env,
        )
        await self._wait_http(f"{base}/_sim/state")
        self.simulator_url = base
        env["RUNPOD_V2_BASE_URL"] = f"{base}/v2"
        env["RUNPOD_API_KEY"] = SIMULATOR_API_KEY
        env.setdefault("RUNPOD_PROXY_URL_TEMPLATE", f"{base}/proxy/{{podId}}-{{port}}")
        # the simulator's seeded volume, template and datacenter, unless the caller configured its own
        env.setdefault("RUNPOD_VOLUME_ID", "bjn7d94ej9")
        env.setdefault("RUNPOD_TEMPLATE_ID", "cnz5fxyadi")
        env.setdefault("RUNPOD_DATACENTER_ID", "EU-RO-1")
        env.setdefault("RUNPOD_MAX_PRICE_PER_HOUR", "2.00")
        # demo timings, so a wake and an idle stop happen while someone watches; set any to override
        for name, value in DEMO_TIMINGS.items():
            env.setdefault(name, value)
        log.info(
            "RunPod: the simulator at %s (no real pod is billed); demo timings %s",
            base,
            " ".join(f"{k}={env[k]}" for k in DEMO_TIMINGS),
        )

    def _engine_args(self) -> list[str]:
        if self.config.engine != "vllm":
            return []
        return ["--engine", "vllm", "--engine-log-dir", str(self.config.data_dir / "engines")]

    async def _start_demo_backends(self, env: dict[str, str]) -> None:
        """The Docker and Fly simulators the demo asked for, and the pool's settings pointed at them."""
        wanted = self.config.demo_backends
        if "runpod" in wanted:
            if self.simulator_url is None:
                log.warning("POOL_DEMO_BACKENDS=runpod needs the RunPod simulator (RunPod is configured for real)")
            else:
                self.demo_urls["runpod"] = f"{self.simulator_url}/proxy (pods run the reference worker)"
        if "docker" in wanted and self.config.demo_docker == "daemon":
            env.setdefault("POOL_NAME", f"devstack-{os.getpid()}")  # the label the stop removes (docker_daemon)
            socket_path = docker_socket_path(pool_docker_socket=env_setting("STRATA_POOL_DOCKER_SOCKET", env),
                                             docker_host=env.get("DOCKER_HOST"))  # fmt: skip
            await check_daemon(socket_path)
            set_seed_setting(env, "STRATA_POOL_DOCKER_SOCKET", socket_path)
            self.docker_daemon = (socket_path, env["POOL_NAME"])
            self.demo_urls["docker"] = f"unix://{socket_path} (the real daemon: containers of {WORKER_IMAGE})"
        elif "docker" in wanted:
            import tempfile

            # AF_UNIX paths are short (108 bytes): the temp dir, not the data dir, holds the socket
            socket_path = str(Path(tempfile.gettempdir()) / f"thermostat-docker-sim-{os.getpid()}.sock")
            argv = [sys.executable, "-m", "thermostat.dev.simulators.docker", "--socket", socket_path]
            await self._spawn("docker-sim", argv, env)
            await self._wait_unix(socket_path)
            set_seed_setting(env, "STRATA_POOL_DOCKER_SOCKET", socket_path)
            self.demo_urls["docker"] = f"unix://{socket_path}"
        if "fly" in wanted:
            port = self._free_port()
            argv = [sys.executable, "-m", "thermostat.dev.simulators.fly", "--port", str(port),
                    "--token", FLY_DEMO_TOKEN, "--app", FLY_DEMO_APP]  # fmt: skip
            await self._spawn("fly-sim", argv, env)
            base = f"http://127.0.0.1:{port}"
            await self._wait_http(
                f"{base}/v1/apps/{FLY_DEMO_APP}/machines", headers={"Authorization": f"Bearer {FLY_DEMO_TOKEN}"}
            )
            env.update({
                "FLY_API_TOKEN": FLY_DEMO_TOKEN, "POOL_FLY_BASE_URL": f"{base}/v1",
                "POOL_FLY_ENDPOINT_TEMPLATE": f"{base}/vm/{{id}}",
            })  # fmt: skip
            set_seed_setting(env, "STRATA_POOL_FLY_APP", FLY_DEMO_APP)
            set_seed_setting(env, "STRATA_POOL_FLY_REGION", "sjc")
            self.demo_urls["fly"] = f"{base}/v1"
        if wanted:
            log.info("pool demo backends: %s", ", ".join(f"{k} at {v}" for k, v in self.demo_urls.items()))

    async def _wait_unix(self, path: str, timeout: float = 15) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            await self._check_alive()
            if await asyncio.to_thread(os.path.exists, path):
                with contextlib.suppress(httpx.HTTPError):
                    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=path), timeout=1) as client:
                        if (await client.get("http://docker/_ping")).status_code == 200:
                            return
            if time.monotonic() > deadline:
                raise RuntimeError(f"no Docker simulator answered on {path} within {timeout:.0f}s")
            await asyncio.sleep(0.1)

    async def _start_edge(self) -> None:
        cfg = self.config
        reflection = reflecting(tuple(cfg.services))
        spec = EdgeSpec(
            upstreams=upstreams(cfg.services, ports=self.ports, host="127.0.0.1"),
            descriptor_set=ROOT / "build" / "thermostat.pb",
            reflection_cluster=reflection.name if reflection else None,
            listen_port=cfg.edge_port,
            admin_port=cfg.admin_port or self._free_port(),
            stats_port=cfg.stats_port or self._free_port(),
            tracing=edge_tracing_from_env({**os.environ, **cfg.extra_env}),
        )
        # the repo's deploy/envoy/envoy.yaml is make run's; a test stack (port 0) writes its own copy
        path = write_envoy_config(spec, cfg.data_dir / "envoy.yaml") if cfg.edge_port == 0 else write_envoy_config(spec)
        self.envoy = await start_envoy(path, log_path=cfg.data_dir / "envoy.log", concurrency=cfg.edge_concurrency)
        port = self.envoy.listeners.get("edge", cfg.edge_port)
        self.edge_url = f"http://127.0.0.1:{port}"
        self.edge_stats_url = f"http://127.0.0.1:{self.envoy.listeners.get('stats', spec.stats_port)}{STATS_PATH}"
        self.edge_admin_url = self.envoy.admin_url
        await self._wait_http(f"{self.edge_url}/health", timeout=20)

    async def _spawn(self, name: str, argv: list[str], env: Mapping[str, str], *, port: int | None = None) -> Child:
        child = Child(name=name, process=await self._exec(argv, env), argv=argv, env=dict(env), port=port)
        child.relay = asyncio.create_task(self._relay(child, child.process))
        self.children.append(child)
        return child

    @staticmethod
    async def _exec(argv: Sequence[str], env: Mapping[str, str]) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *argv,
            env=dict(env),
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )

    def replicas(self, service: ServiceDef) -> list[Child]:
        """The processes of `service`, its first replica first."""
        ports = self.replica_ports.get(service.name, [])
        return sorted((c for c in self.children if c.port in ports), key=lambda c: ports.index(c.port or 0))

    async def respawn(self, child: Child) -> None:
        """Start an exited child again: same command, environment and port."""
        if child.relay is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(child.relay, 2)
        self._move_metrics_if_taken(child)
        child.process, child.started = await self._exec(child.argv, child.env), time.monotonic()
        child.relay = asyncio.create_task(self._relay(child, child.process))

    def _move_metrics_if_taken(self, child: Child) -> None:
        """A free port chosen at start is an ephemeral one: while its child was down, another process's outgoing
        connection may have been given it. The gRPC port is the child's address and stays; /metrics moves."""
        service = next((s for s in self.config.services if s.name == child.name.split("#")[0]), None)
        if service is None or not child.env.get(service.metrics_port_env, "").isdigit():
            return
        port = int(child.env[service.metrics_port_env])
        if not port or not in_use(port):
            return
        moved = self._free_port()
        log.warning(
            "%s's /metrics port %d was taken while it was down; it serves /metrics on %d", child.name, port, moved
        )
        child.env = {**child.env, service.metrics_port_env: str(moved)}
        if self.metrics_ports.get(service.name) == port and "#" not in child.name:
            self.metrics_ports[service.name] = moved

    async def _keep_running(self, child: Child) -> None:
        """Report a child that exits while the stack runs and start it again after a backoff."""
        while True:
            returncode = await child.process.wait()
            if self._stopping.is_set():
                return
            uptime = time.monotonic() - child.started
            delay = restart_delay(child.restarts, uptime)
            child.restarts = restarts_in_a_row(child.restarts, uptime)
            log.warning(
                "%s %s after %.0fs up; restarting it in %.0fs (restart %d in a row)",
                child.name,
                exit_description(returncode),
                uptime,
                delay,
                child.restarts,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            if self._stopping.is_set():
                return
            await self.respawn(child)
            log.warning("%s restarted (pid %d)", child.name, child.process.pid)
            if self._stopping.is_set():  # stop() may have passed this child while it was down: stop it here
                await self._stop(child, leaving_signal(child.name), 15)
                return

    async def _relay(self, child: Child, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        # one width for every child and the stack's own lines, from the registry: the columns align
        width = max(NAME_WIDTH, len(child.name))
        async for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip()
            child.last_lines.append(line)
            if self.config.relay_logs:
                shown = human(line) if self.config.human_logs else line
                print(f"{child.name:<{width}} | {shown}", flush=True)

    async def wait_serving(self, child: Child, service: ServiceDef, timeout: float = 30) -> None:
        """Until `child`, a process of `service`, reports SERVING (it or another child exiting first raises)."""
        target = f"127.0.0.1:{child.port}"
        deadline = time.monotonic() + timeout
        # Reconnect quickly: a channel that tried before the child listened would otherwise back off
        # exponentially (1 s, 1.6 s, … ) and could miss a child that comes up within the timeout.
        options = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500)]
        async with grpc.aio.insecure_channel(target, options=options) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                await self._check_alive()
                with contextlib.suppress(grpc.aio.AioRpcError):
                    reply = await stub.Check(health_pb2.HealthCheckRequest(service=service.health_service), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{service.name} not SERVING on {target} after {timeout:.0f}s")
                await asyncio.sleep(0.1)

    async def _wait_http(self, url: str, timeout: float = 15, headers: Mapping[str, str] | None = None) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=1, headers=dict(headers or {})) as client:
            while True:
                await self._check_alive()
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(url)).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not answer 200 within {timeout:.0f}s")
                await asyncio.sleep(0.1)

    async def _check_alive(self) -> None:
        for child in self.children:
            if child.process.returncode is not None:
                if child.relay is not None:  # its last words may still be in the pipe
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await asyncio.wait_for(asyncio.shield(child.relay), 2)
                said = "".join(f"\n  | {line}" for line in child.last_lines) or " (no output)"
                raise RuntimeError(f"{child.name} {exit_description(child.process.returncode)}; its last lines:{said}")

    # ----------------------------------------------------------------------------------------------- stop

    async def _stop(self, child: Child, sig: int, timeout: float) -> None:
        if child.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(sig)
            try:
                await asyncio.wait_for(child.process.wait(), timeout)
            except TimeoutError:
                log.warning("%s did not stop within %.0fs; killing it", child.name, timeout)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                await child.process.wait()
        if child.relay is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(child.relay, 2)

    async def stop(self) -> None:
        self._stopping.set()
        if self.envoy is not None:
            await self.envoy.stop()
            self.envoy = None
        for child in reversed(self.children):
            await self._stop(child, leaving_signal(child.name), 15)
        # a watcher that restarted its child while stop() passed it stops that child itself
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._watchers = []
        self.children.clear()
        if self.docker_daemon is not None:  # after the pool dispatcher: nothing starts another container now
            socket_path, pool = self.docker_daemon
            removed = await remove_pool_containers(socket_path, pool)
            log.info("docker: removed %d container(s) of pool %s", removed, pool)
        starting, self._postgres_starting = self._postgres_starting, None
        if starting is not None:
            await asyncio.wait({starting})  # bounded by the server's own start timeout
            if not starting.cancelled():
                starting.exception()  # retrieved: a failed start was already raised to start()'s caller
        if self.postgres is not None:
            await asyncio.to_thread(self.postgres.stop)
            self.postgres = None
        self._lock.release()

    def summary(self, exports: str = "") -> str:
        """What runs where, `exports` (the lines to paste into another shell), and how to stop it."""
        lines = ["", "Thermostat is up:", f"  edge (REST + gRPC)   {self.edge_url}   GET {self.edge_url}/health"]
        lines.append(f"  edge stats           {self.edge_stats_url}   (Envoy admin {self.edge_admin_url}, loopback)")
        for service in self.config.services:
            for prefix in service.http_prefixes:
                base = f"{self.edge_url}{prefix.rstrip('/')}"
                lines.append(f"  {'OpenAI API':<20} {base}   (base_url; api_key: THERMOSTAT_INFERENCE_TOKEN)")
        for name, port in self.ports.items():
            if name.endswith("-http"):
                continue
            metrics = self.metrics_ports.get(name)
            where = f"   metrics http://127.0.0.1:{metrics}/metrics" if metrics else ""
            lines.append(f"  {name:<20} 127.0.0.1:{port} (gRPC, health, reflection){where}")
        if self.simulator_url:
            sim = self.simulator_url
            lines.append(
                f"  runpod simulator     {sim}/v2   (control: {sim}/_sim; what billed when: {sim}/_sim/billed)"
            )
            if self.config.engine == "vllm":
                engines = self.config.data_dir / "engines"
                lines.append(
                    f"  pod engine           a real vLLM per RUNNING pod (40-60 s to load; its output in {engines})"
                )
            else:
                lines.append("  pod engine           simulated: a canned answer (make run ENGINE=vllm: a real vLLM)")
        for kind, where in self.demo_urls.items():
            lines.append(f"  pool demo backend    {kind:<7} {where}   (machine type demo-{kind})")
        if self.postgres is not None:
            via = "  (services: Unix socket there)" if self.postgres.socket_dir else ""
            lines.append(
                f"  postgres (embedded)  127.0.0.1:{self.postgres.port}   data in {self.postgres.data_dir}{via}"
            )
        else:
            lines.append("  postgres             DATABASE_URL")
        if exports:
            lines += ["", exports]
        lines += ["", "Ctrl-C stops everything."]
        return "\n".join(lines)
