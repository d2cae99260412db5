"""A real vLLM behind each simulated pod (`RunPodSimulator(engine=...)`, `--engine vllm`).

When a pod reaches RUNNING its engine process starts (loopback, a free port, the tiny model served under the
`model_name` setting); when the pod leaves RUNNING (stop, terminate, restart) or the simulator stops, it is
stopped: SIGTERM, then SIGKILL after a grace, the process group with it. The pod's proxy
`/proxy/{podId}-{vllm_port}/<anything>` relays every method and path to it, the answer streamed back unbuffered
(streaming.py); before the engine listens the proxy answers 502, as RunPod's does for a port nobody listens on.
So a pod's boot time is its engine's real load and its readiness comes from the engine's real /metrics.

A background thread moves the pods' lifecycle on from the clock (the world is lazy: without it an engine would
start only when something next read the pod) and watches each engine's /health to log when it is ready.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from thermostat.chassis.ports import free_port
from thermostat.dev.engine.process import EngineProcess
from thermostat.dev.engine.recipe import Installation
from thermostat.dev.simulators.runpod.streaming import Head, Streamed
from thermostat.dev.simulators.runpod.world import PodWorld
from thermostat.dev.simulators.serving import Answer, RecordedRequest

_log = logging.getLogger(__name__)
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host",
     "content-length"}
)  # fmt: skip
# the simulator's own server writes these for every answer; the engine's would be duplicates
_OWN_HEADERS = frozenset({"date", "server"})
_BAD_GATEWAY: Head = (502, {"Content-Type": "text/html; charset=utf-8"})
_BAD_GATEWAY_BODY = b"<html>502 Bad Gateway</html>\n"
TICK_SECONDS = 0.25


class Engines:
    """Engines keeps one EngineProcess per RUNNING pod of `world` (the world's EngineHooks)."""

    def __init__(
        self, world: PodWorld, installation: Installation, *, log_dir: Path | None = None, stop_grace: float = 10.0
    ) -> None:
        self._world = world
        self._installation = installation
        self._own_log_dir = log_dir is None
        self._log_dir = log_dir or Path(tempfile.mkdtemp(prefix="runpod-sim-engines-"))
        self._stop_grace = stop_grace
        self._lock = threading.Lock()
        self._engines: dict[str, EngineProcess] = {}
        self._starts = 0
        self._stopping: list[threading.Thread] = []
        self._reported: set[int] = set()  # pids whose readiness or exit was logged
        self._closed = threading.Event()
        self._ticker: threading.Thread | None = None

    @property
    def log_dir(self) -> Path:
        return self._log_dir

    # --- the world's hooks (called under its lock: nothing here blocks) ------------------------------------

    def started(self, pod_id: str) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._starts += 1
            log_path = self._log_dir / f"{pod_id}-{self._starts}.log"
            engine = EngineProcess(
                self._installation,
                port=free_port(),
                log_path=log_path,
                served_model_name=self._world.settings.model_name,
            )
            previous = self._engines.pop(pod_id, None)
            self._engines[pod_id] = engine
        if previous is not None:
            self._stop_later(pod_id, previous)
        _log.info(
            "engine for pod %s: starting vLLM (pid %d, port %d, log %s)", pod_id, engine.pid, engine.port, log_path
        )

    def stopped(self, pod_id: str) -> None:
        with self._lock:
            engine = self._engines.pop(pod_id, None)
        if engine is not None:
            self._stop_later(pod_id, engine)

    def ready(self, pod_id: str) -> bool:
        with self._lock:
            engine = self._engines.get(pod_id)
        return engine is not None and engine.ready

    # --- control -------------------------------------------------------------------------------------------

    def engine(self, pod_id: str) -> EngineProcess | None:
        """The pod's engine process while it has one (RUNNING), None otherwise."""
        with self._lock:
            return self._engines.get(pod_id)

    def pids(self) -> list[int]:
        """Every engine process not yet reaped, stopping ones included."""
        with self._lock:
            return [engine.pid for engine in self._engines.values() if engine.returncode is None]

    @property
    def starts(self) -> int:
        """How many engines were started (a test keeps this small: each costs its load time)."""
        with self._lock:
            return self._starts

    def start(self) -> None:
        self._closed.clear()
        self._ticker = threading.Thread(target=self._tick, name="runpod-sim-engines", daemon=True)
        self._ticker.start()

    def stop_all(self) -> None:
        """Stop every engine and wait until each is gone: nothing outlives the simulator."""
        with self._lock:
            engines, self._engines = list(self._engines.items()), {}
        for pod_id, engine in engines:
            self._stop_later(pod_id, engine)
        with self._lock:
            stopping, self._stopping = self._stopping, []
        for thread in stopping:
            thread.join()

    def close(self) -> None:
        self._closed.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        self.stop_all()
        if self._own_log_dir:
            for path in self._log_dir.glob("*.log"):
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self._log_dir.rmdir()

    def _stop_later(self, pod_id: str, engine: EngineProcess) -> None:
        def stop() -> None:
            engine.stop(self._stop_grace)
            _log.info("engine for pod %s: stopped (pid %d)", pod_id, engine.pid)

        thread = threading.Thread(target=stop, name=f"runpod-sim-engine-stop-{pod_id}", daemon=True)
        with self._lock:
            self._stopping = [t for t in self._stopping if t.is_alive()] + [thread]
        thread.start()

    def _tick(self) -> None:
        while not self._closed.wait(TICK_SECONDS):
            try:
                self._world.advance()
                with self._lock:
                    engines = list(self._engines.items())
                for pod_id, engine in engines:
                    self._watch(pod_id, engine)
            except Exception:
                _log.exception("runpod simulator: the engines' tick failed")

    def _watch(self, pod_id: str, engine: EngineProcess) -> None:
        if engine.pid in self._reported:
            return
        if engine.returncode is not None:
            self._reported.add(engine.pid)
            _log.warning(
                "engine for pod %s: vLLM exited with status %s (log %s):\n%s",
                pod_id, engine.returncode, engine.log_path, engine.last_lines(),
            )  # fmt: skip
        elif engine.probe(timeout=0.2):
            self._reported.add(engine.pid)
            _log.info("engine for pod %s: ready in %.1fs", pod_id, engine.ready_after or 0.0)

    # --- the proxy -----------------------------------------------------------------------------------------

    def relay(self, request: RecordedRequest, *, pod_id: str, port: int, target: str) -> Answer | Streamed:
        """`/proxy/{pod_id}-{port}{target}`: the proxy's own refusals, else the request relayed to the engine."""
        refused = self._world.vllm_gate(pod_id, port, request.headers.get("user-agent", ""), model_loaded=True)
        if refused is not None:
            return refused
        engine = self.engine(pod_id)
        if engine is None or port != self._world.settings.vllm_port:
            return _BAD_GATEWAY[0], dict(_BAD_GATEWAY[1]), _BAD_GATEWAY_BODY
        return relayed(engine.port, request, target, timeout=self._world.settings.proxy_timeout_seconds)


class _Upstream:
    """One relayed request's connection to the engine; `abort` may come from another thread at any time."""

    def __init__(self, port: int, timeout: float) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self._lock = threading.Lock()
        self._aborted = False

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            self._shutdown()

    def check(self) -> None:
        """Once connected: an abort that came while connecting takes effect now."""
        with self._lock:
            if self._aborted:
                self._shutdown()

    def _shutdown(self) -> None:
        sock = self.connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def relayed(port: int, request: RecordedRequest, target: str, *, timeout: float) -> Streamed:
    """The request sent to 127.0.0.1:port as it came; the answer's status, headers and every chunk as they come.
    502 when nothing listens, 524 when nothing came within `timeout` (Cloudflare's 100 s in front of RunPod)."""
    upstream = _Upstream(port, timeout)
    body: list[bytes] = []
    response: list[http.client.HTTPResponse] = []

    def head() -> Head:
        sent = {name: value for name, value in request.headers.items() if name.lower() not in _HOP_BY_HOP}
        content = request.raw_body if request.raw_body is not None else request.body.encode()
        try:
            upstream.connection.connect()
            upstream.check()
            upstream.connection.request(request.method, target, body=content or None, headers=sent)
            answer = upstream.connection.getresponse()
        except TimeoutError:
            body.append(b"error code: 524\n")
            return 524, {"Content-Type": "text/plain; charset=utf-8", "Content-Length": str(len(body[0]))}
        except (OSError, http.client.HTTPException):
            body.append(_BAD_GATEWAY_BODY)
            return _BAD_GATEWAY[0], {**_BAD_GATEWAY[1], "Content-Length": str(len(_BAD_GATEWAY_BODY))}
        response.append(answer)
        kept = {name: value for name, value in answer.getheaders()
                if name.lower() not in _HOP_BY_HOP and name.lower() not in _OWN_HEADERS}  # fmt: skip
        length = answer.getheader("Content-Length")
        if length is not None and not answer.chunked:
            kept["Content-Length"] = length
        return answer.status, kept

    def chunks() -> Iterator[bytes]:
        try:
            if not response:
                yield from body
                return
            while True:
                try:
                    data = response[0].read1(64 * 1024)
                except (OSError, http.client.HTTPException) as error:
                    raise ConnectionError("the engine's answer was cut short") from error
                if not data:
                    return
                yield data
        finally:
            upstream.connection.close()

    return Streamed(head=head, chunks=chunks(), abort=upstream.abort)
