"""Catalogue: this process's copy of the machine types (with its version) and the backends that serve them.

The catalogue is cached with its version: `LISTEN pool_catalogue` and every scaler pass refresh it, and a name
not in the copy is looked up in the store before it is refused. A catalogue applied at start or from the store is
never refused (the process would never come up to take the PUT that fixes it): its types this process cannot serve
(their backend is not configured) are logged loudly and refused per job instead. A change forgets the process's
outlooks (caps may have changed); a replace also asks for placement.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from thermostat.policy.pool.backends import (
    ENABLED_SETTING,
    REQUIRED_SETTINGS,
    BackendChoice,
    backend_use,
    check_backends,
    check_runtimes,
    names_runtime,
)
from thermostat.policy.pool.machine_type import (
    BackendKind,
    Catalogue,
    CatalogueRejected,
    MachineType,
    catalogue_to_json,
    parse_catalogue,
)
from thermostat.providers.pool.backend import Backend, BackendError, ListsRuntimes

from ..metrics import PoolMetrics
from ..repository import PoolRepository
from .local import Local, WantsPlacement

log = logging.getLogger("thermostat.pool_dispatcher")


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogueState:
    catalogue: Catalogue
    version: int  # 0: the configured one, never stored


class Backends:
    """The configured backends, keyed by kind's value (as the machine rows record it); a type picks by `backend`."""

    def __init__(
        self,
        backends: Mapping[BackendKind, Backend],
        missing_settings: Mapping[BackendKind, str] | None = None,
        choice: BackendChoice | None = None,
    ) -> None:
        # None: whatever backends were given are enabled, and an entry without `backend` is docker
        self.choice = choice or BackendChoice(enabled=frozenset(backends) | BackendChoice().enabled)
        self.by_kind: dict[str, Backend] = {
            str(kind): backend for kind, backend in backends.items() if kind in self.choice.enabled
        }
        self.missing_settings = dict(missing_settings or {})

    def get(self, kind: str) -> Backend:
        backend = self.by_kind.get(kind)
        if backend is None:
            raise BackendError(f"the {kind} backend is not configured in this process")
        return backend

    def check(self, catalogue: Catalogue) -> Catalogue | CatalogueRejected:
        """The catalogue, or why this process's backends cannot serve it (PUT's 400)."""
        configured = [BackendKind(kind) for kind in self.by_kind]
        return check_backends(
            catalogue, configured=configured, missing_settings=self.missing_settings, enabled=self.choice.enabled
        )

    async def servable(self, catalogue: Catalogue) -> Catalogue | CatalogueRejected:
        """`check`, then its docker types naming a runtime the daemon does not list (PUT's 400); the daemon is
        asked only when a type names one."""
        catalogue_or_why = self.check(catalogue)
        if isinstance(catalogue_or_why, CatalogueRejected):
            return catalogue_or_why
        catalogue = catalogue_or_why
        docker = self.by_kind.get(BackendKind.DOCKER.value)
        if not names_runtime(catalogue) or not isinstance(docker, ListsRuntimes):
            return catalogue  # no docker backend here: check_backends refused the type already
        try:
            listed: tuple[str, ...] | str = await docker.runtimes()
        except BackendError as error:
            listed = str(error)
        return check_runtimes(catalogue, listed)

    def refusal(self, machine_type: MachineType) -> str | None:
        """Why this process cannot start machines of the type (its backend is not configured), or None."""
        kind = machine_type.backend
        if kind in self.by_kind:
            return None
        if kind not in self.choice.enabled:
            return f"machine type {machine_type.name}: the {kind.value} backend is not enabled ({ENABLED_SETTING})"
        setting = self.missing_settings.get(kind) or REQUIRED_SETTINGS.get(kind, "its settings")
        return f"machine type {machine_type.name}: the {kind.value} backend is not configured: set {setting}"


class CatalogueCache:
    def __init__(
        self,
        repo: PoolRepository,
        backends: Backends,
        configured: Catalogue,
        metrics: PoolMetrics,
        *,
        local: Local,
        wants_placement: WantsPlacement,
    ) -> None:
        self.repo = repo
        self.backends = backends
        self.local = local
        self.wants_placement = wants_placement
        self.metrics = metrics
        self.state = CatalogueState(catalogue=configured, version=0)
        self._applied(configured)

    def _applied(self, catalogue: Catalogue) -> None:
        """Each type's boot-failure series shows 0 from the catalogue's apply on."""
        self.metrics.types_known((t.name, str(t.backend)) for t in catalogue.types)

    @property
    def catalogue(self) -> Catalogue:
        return self.state.catalogue

    def get(self, name: str) -> MachineType | None:
        return self.state.catalogue.get(name)

    async def refresh(self) -> None:
        """Apply the stored catalogue when it is newer than this process's copy."""
        stored = await self.repo.catalogue.read_catalogue()
        if stored is None or stored[0] <= self.state.version:
            return
        version, body = stored
        parsed = parse_catalogue(body, default_backend=self.backends.choice.default)
        if not isinstance(parsed, Catalogue):  # stored only after validation: a newer release's shape
            log.error("stored catalogue version %d does not parse here: %s", version, parsed.detail)
            return
        self.state = CatalogueState(catalogue=parsed, version=version)
        self._applied(parsed)
        self.local.outlooks.clear()  # caps may have changed: what a submit said of the next no longer holds
        log.info("catalogue version %d: %s", version, ", ".join(parsed.names) or "(empty)")
        self.warn_unservable(parsed, version)

    async def replace(self, catalogue: Catalogue) -> int:
        """Store the whole catalogue; removed types' queued jobs fail; every process applies it at once."""
        version, failed = await self.repo.catalogue.replace_catalogue(
            json.dumps(catalogue_to_json(catalogue, admin=True)), catalogue.names
        )
        self.state = CatalogueState(catalogue=catalogue, version=version)
        self._applied(catalogue)
        self.local.outlooks.clear()  # caps may have changed: what a submit said of the next no longer holds
        log.info("catalogue replaced (version %d, %d queued job(s) of removed types failed)", version, failed)
        self.wants_placement()
        return version

    async def type_named(self, name: str) -> MachineType | None:
        """The type from the catalogue, re-reading the stored one before refusing a name."""
        found = self.catalogue.get(name)
        if found is None and await self.repo.catalogue.catalogue_version() > self.state.version:
            await self.refresh()
            found = self.catalogue.get(name)
        return found

    def warn_unservable(self, catalogue: Catalogue, version: int) -> None:
        """Log which backends the catalogue uses of those configured, and the types this process cannot serve (see
        the module)."""
        configured = [BackendKind(kind) for kind in self.backends.by_kind]
        log.info("catalogue version %d: %s", version, backend_use(catalogue, configured=configured))
        checked = self.backends.check(catalogue)
        if isinstance(checked, CatalogueRejected):
            log.error(
                "catalogue version %d cannot be fully served by this process (jobs of these types are refused "
                "until the settings are fixed or the catalogue is replaced): %s",
                version,
                checked.detail,
            )
