"""The provider backends' settings, read from the environment, and the backends built from them.

`PoolBackendSettings` is a pydantic-settings class a service's settings can inherit beside ServiceSettings
(its SecretStr fields are then registered for log redaction like any other). Variables:

| Variable | Default | Meaning |
|---|---|---|
| POOL_NAME | thermostat | the pool's name: Docker label and every machine's name prefix |
| POOL_WORKER_PORT | 8080 | the port the worker listens on inside a container, pod or Fly machine |
| POOL_PROVIDER_TIMEOUT_SECONDS | 30 | one provider API call's timeout |
| POOL_DOCKER_SOCKET | - | the Docker daemon's socket; else a unix:// DOCKER_HOST; else /var/run/docker.sock |
| POOL_RUNPOD_API_KEY | - | RunPod key for the pool; else RUNPOD_API_KEY (the pod controller's) |
| RUNPOD_V2_BASE_URL, RUNPOD_PROXY_URL_TEMPLATE | RunPod's | shared with the pod controller |
| FLY_API_TOKEN, POOL_FLY_APP, POOL_FLY_REGION | - | all three configure the fly backend |
| POOL_FLY_BASE_URL | https://api.machines.dev/v1 | the Machines API |
| POOL_FLY_ENDPOINT_TEMPLATE | http://{id}.vm.{app}.internal:{port} | a machine's worker address |

A backend is configured when what it needs is set (Docker: a socket file exists at the resolved path);
`missing_settings` says, for each one that is not, what to set, for the catalogue check
(thermostat.policy.pool.backends.check_backends) to name in its 400.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from thermostat.policy.pool.machine_type import BackendKind
from thermostat.providers.pool.backend import DEFAULT_WORKER_PORT
from thermostat.providers.pool.docker import DockerBackend, docker_socket_path
from thermostat.providers.pool.fly import DEFAULT_ENDPOINT_TEMPLATE, DEFAULT_FLY_BASE_URL, FlyBackend
from thermostat.providers.pool.runpod import RunPodBackend
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.providers.runpod.client import DEFAULT_BASE_URL, DEFAULT_PROXY_URL_TEMPLATE

ProviderBackend = DockerBackend | RunPodBackend | FlyBackend


class PoolBackendSettings(BaseSettings):
    """PoolBackendSettings configure the docker, runpod and fly backends (local needs none)."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", env_ignore_empty=True)

    pool_name: str = Field(default="thermostat", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,30}$")
    pool_worker_port: int = Field(default=DEFAULT_WORKER_PORT, ge=1, le=65535)
    pool_provider_timeout_seconds: float = Field(default=30.0, gt=0, le=300)
    pool_docker_socket: str | None = None
    docker_host: str | None = None
    pool_runpod_api_key: SecretStr | None = None
    runpod_api_key: SecretStr | None = None
    runpod_v2_base_url: str = DEFAULT_BASE_URL
    runpod_proxy_url_template: str = DEFAULT_PROXY_URL_TEMPLATE
    fly_api_token: SecretStr | None = None
    pool_fly_app: str | None = None
    pool_fly_region: str | None = None
    pool_fly_base_url: str = DEFAULT_FLY_BASE_URL
    pool_fly_endpoint_template: str = DEFAULT_ENDPOINT_TEMPLATE

    @property
    def docker_socket(self) -> str:
        return docker_socket_path(pool_docker_socket=self.pool_docker_socket, docker_host=self.docker_host)

    @property
    def runpod_key(self) -> str | None:
        """POOL_RUNPOD_API_KEY, falling back to RUNPOD_API_KEY."""
        for key in (self.pool_runpod_api_key, self.runpod_api_key):
            if key is not None and key.get_secret_value().strip():
                return key.get_secret_value().strip()
        return None


def missing_settings(
    settings: PoolBackendSettings, *, socket_exists: Callable[[str], bool] = os.path.exists
) -> dict[BackendKind, str]:
    """For each provider backend that is not configured, what to set (the 400's wording)."""
    missing: dict[BackendKind, str] = {}
    if not socket_exists(settings.docker_socket):
        missing[BackendKind.DOCKER] = (
            f"POOL_DOCKER_SOCKET (or a unix:// DOCKER_HOST): there is no Docker socket at {settings.docker_socket}"
        )
    if settings.runpod_key is None:
        missing[BackendKind.RUNPOD] = "POOL_RUNPOD_API_KEY (or RUNPOD_API_KEY)"
    fly_token = settings.fly_api_token.get_secret_value().strip() if settings.fly_api_token else ""
    fly = [
        name
        for name, value in (
            ("FLY_API_TOKEN", fly_token),
            ("POOL_FLY_APP", (settings.pool_fly_app or "").strip()),
            ("POOL_FLY_REGION", (settings.pool_fly_region or "").strip()),
        )
        if not value
    ]
    if fly:
        missing[BackendKind.FLY] = " and ".join(fly)
    return missing


def build_backends(
    settings: PoolBackendSettings,
    worker: WorkerClient,
    *,
    socket_exists: Callable[[str], bool] = os.path.exists,
) -> dict[BackendKind, ProviderBackend]:
    """One backend per configured provider (local is the service's own); each has `aclose()` for shutdown."""
    missing = missing_settings(settings, socket_exists=socket_exists)
    timeout = settings.pool_provider_timeout_seconds
    backends: dict[BackendKind, ProviderBackend] = {}
    if BackendKind.DOCKER not in missing:
        backends[BackendKind.DOCKER] = DockerBackend(
            worker, socket_path=settings.docker_socket, pool=settings.pool_name,
            worker_port=settings.pool_worker_port, timeout_seconds=timeout,
        )  # fmt: skip
    if BackendKind.RUNPOD not in missing:
        backends[BackendKind.RUNPOD] = RunPodBackend(
            worker, api_key=settings.runpod_key, base_url=settings.runpod_v2_base_url,
            proxy_url_template=settings.runpod_proxy_url_template, worker_port=settings.pool_worker_port,
            name_prefix=settings.pool_name, timeout_seconds=timeout,
        )  # fmt: skip
    if BackendKind.FLY not in missing and settings.fly_api_token is not None:
        backends[BackendKind.FLY] = FlyBackend(
            worker, api_token=settings.fly_api_token.get_secret_value(), app=(settings.pool_fly_app or "").strip(),
            region=(settings.pool_fly_region or "").strip(), base_url=settings.pool_fly_base_url,
            endpoint_template=settings.pool_fly_endpoint_template, worker_port=settings.pool_worker_port,
            name_prefix=settings.pool_name, timeout_seconds=timeout,
        )  # fmt: skip
    return backends
