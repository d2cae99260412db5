"""The provider backends' settings, read from the environment, and the backends built from them.

`PoolBackendSettings` is a pydantic-settings class a service's settings can inherit beside ServiceSettings
(its SecretStr fields are then registered for log redaction like any other). Variables:

| Variable | Default | Meaning |
|---|---|---|
| POOL_NAME | thermostat | the pool's name: Docker label and every machine's name prefix |
| POOL_WORKER_PORT | 8080 | the port the worker listens on inside a container, pod or Fly machine |
| POOL_PROVIDER_TIMEOUT_SECONDS | 30 | one provider API call's timeout |
| STRATA_POOL_DOCKER_SOCKET | - | the Docker daemon's socket; else a unix:// DOCKER_HOST; else /var/run/docker.sock |
| POOL_EGRESS_IMAGE | thermostat-egress:latest | the egress proxy's image (docker types listing `egress_hosts`) |
| POOL_RUNPOD_API_KEY | - | RunPod key for the pool; else RUNPOD_API_KEY (the pod controller's) |
| RUNPOD_V2_BASE_URL, RUNPOD_PROXY_URL_TEMPLATE | RunPod's | shared with the pod controller |
| FLY_API_TOKEN, STRATA_POOL_FLY_APP, STRATA_POOL_FLY_REGION | - | all three configure the fly backend |
| POOL_FLY_BASE_URL | https://api.machines.dev/v1 | the Machines API |
| POOL_FLY_ENDPOINT_TEMPLATE | http://{id}.vm.{app}.internal:{port} | a machine's worker address |

The worker-pool seed's names (STRATA_POOL_*) are the primary ones, so the original package's deployments carry over;
the names this service used first stay as aliases (POOL_DOCKER_SOCKET, POOL_FLY_APP,
POOL_FLY_REGION: ALIASES). Both set and different is a start-up error naming both
(`aliased`): silently preferring one would start machines somewhere the operator did not mean.

A backend is configured when what it needs is set (Docker: a socket file exists at the resolved path);
`missing_settings` says, for each one that is not, what to set, for the catalogue check
(thermostat.policy.pool.backends.check_backends) to name in its 400.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from thermostat.policy.pool.egress import DEFAULT_EGRESS_IMAGE
from thermostat.policy.pool.machine_type import BackendKind
from thermostat.providers.pool.backend import DEFAULT_WORKER_PORT
from thermostat.providers.pool.docker import DockerBackend, docker_socket_path
from thermostat.providers.pool.fly import DEFAULT_ENDPOINT_TEMPLATE, DEFAULT_FLY_BASE_URL, FlyBackend
from thermostat.providers.pool.runpod import RunPodBackend
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.providers.runpod.client import DEFAULT_BASE_URL, DEFAULT_PROXY_URL_TEMPLATE

ProviderBackend = DockerBackend | RunPodBackend | FlyBackend

ALIASES: Mapping[str, str] = {
    "STRATA_POOL_DOCKER_SOCKET": "POOL_DOCKER_SOCKET",
    "STRATA_POOL_REQUIRE_DOCKER": "POOL_REQUIRE_DOCKER",
    "STRATA_POOL_FLY_APP": "POOL_FLY_APP",
    "STRATA_POOL_FLY_REGION": "POOL_FLY_REGION",
    "STRATA_POOL_FLY_LIVE": "THERMOSTAT_POOL_FLY_LIVE",
    "STRATA_POOL_FLY_ON_NETWORK": "THERMOSTAT_POOL_FLY_ON_NETWORK",
    "STRATA_POOL_RUNPOD_LIVE": "THERMOSTAT_POOL_RUNPOD_LIVE",
    "STRATA_POOL_RUNPOD_GPU": "THERMOSTAT_POOL_RUNPOD_GPU",
}
"""The seed's environment names (primary) and this service's earlier names for the same settings (aliases)."""


def aliased(primary: str, primary_value: str | None, alias: str, alias_value: str | None) -> str | None:
    """The setting under its seed name or its alias (blank counts as unset), or None; ValueError naming both when
    both are set and differ."""
    first = (primary_value or "").strip() or None
    second = (alias_value or "").strip() or None
    if first is not None and second is not None and first != second:
        raise ValueError(
            f"{primary} and {alias} name the same setting and differ ({primary}={first!r}, {alias}={second!r}): "
            f"set one ({primary} is the seed's name, {alias} its alias)"
        )
    return first or second


def env_setting(primary: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """A seed-named setting read from `environ` with its alias (ALIASES), as `aliased` reads it."""
    alias = ALIASES[primary]
    return aliased(primary, environ.get(primary), alias, environ.get(alias))


class PoolBackendSettings(BaseSettings):
    """PoolBackendSettings configure the docker, runpod and fly backends (local needs none)."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", env_ignore_empty=True)

    pool_name: str = Field(default="thermostat", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,30}$")
    pool_worker_port: int = Field(default=DEFAULT_WORKER_PORT, ge=1, le=65535)
    pool_provider_timeout_seconds: float = Field(default=30.0, gt=0, le=300)
    strata_pool_docker_socket: str | None = None
    pool_docker_socket: str | None = None  # alias of STRATA_POOL_DOCKER_SOCKET
    docker_host: str | None = None
    pool_egress_image: str = Field(default=DEFAULT_EGRESS_IMAGE, min_length=1)
    pool_runpod_api_key: SecretStr | None = None
    runpod_api_key: SecretStr | None = None
    runpod_v2_base_url: str = DEFAULT_BASE_URL
    runpod_proxy_url_template: str = DEFAULT_PROXY_URL_TEMPLATE
    fly_api_token: SecretStr | None = None
    strata_pool_fly_app: str | None = None
    pool_fly_app: str | None = None  # alias of STRATA_POOL_FLY_APP
    strata_pool_fly_region: str | None = None
    pool_fly_region: str | None = None  # alias of STRATA_POOL_FLY_REGION
    pool_fly_base_url: str = DEFAULT_FLY_BASE_URL
    pool_fly_endpoint_template: str = DEFAULT_ENDPOINT_TEMPLATE

    @model_validator(mode="after")
    def _aliases_agree(self) -> PoolBackendSettings:
        for read in (self.docker_socket_setting, self.fly_app, self.fly_region):
            read()  # a ValueError naming both variables stops the start
        return self

    def docker_socket_setting(self) -> str | None:
        return aliased("STRATA_POOL_DOCKER_SOCKET", self.strata_pool_docker_socket,
                       "POOL_DOCKER_SOCKET", self.pool_docker_socket)  # fmt: skip

    def fly_app(self) -> str:
        return aliased("STRATA_POOL_FLY_APP", self.strata_pool_fly_app, "POOL_FLY_APP", self.pool_fly_app) or ""

    def fly_region(self) -> str:
        return (
            aliased("STRATA_POOL_FLY_REGION", self.strata_pool_fly_region, "POOL_FLY_REGION", self.pool_fly_region)
            or ""
        )

    @property
    def docker_socket(self) -> str:
        return docker_socket_path(pool_docker_socket=self.docker_socket_setting(), docker_host=self.docker_host)

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
            f"STRATA_POOL_DOCKER_SOCKET (or a unix:// DOCKER_HOST): there is no Docker socket at "
            f"{settings.docker_socket}"
        )
    if settings.runpod_key is None:
        missing[BackendKind.RUNPOD] = "POOL_RUNPOD_API_KEY (or RUNPOD_API_KEY)"
    fly_token = settings.fly_api_token.get_secret_value().strip() if settings.fly_api_token else ""
    fly = [
        name
        for name, value in (
            ("FLY_API_TOKEN", fly_token),
            ("STRATA_POOL_FLY_APP", settings.fly_app()),
            ("STRATA_POOL_FLY_REGION", settings.fly_region()),
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
            worker_port=settings.pool_worker_port, timeout_seconds=timeout, egress_image=settings.pool_egress_image,
        )  # fmt: skip
    if BackendKind.RUNPOD not in missing:
        backends[BackendKind.RUNPOD] = RunPodBackend(
            worker, api_key=settings.runpod_key, base_url=settings.runpod_v2_base_url,
            proxy_url_template=settings.runpod_proxy_url_template, worker_port=settings.pool_worker_port,
            name_prefix=settings.pool_name, timeout_seconds=timeout,
        )  # fmt: skip
    if BackendKind.FLY not in missing and settings.fly_api_token is not None:
        backends[BackendKind.FLY] = FlyBackend(
            worker, api_token=settings.fly_api_token.get_secret_value(), app=settings.fly_app(),
            region=settings.fly_region(), base_url=settings.pool_fly_base_url,
            endpoint_template=settings.pool_fly_endpoint_template, worker_port=settings.pool_worker_port,
            name_prefix=settings.pool_name, timeout_seconds=timeout,
        )  # fmt: skip
    return backends
