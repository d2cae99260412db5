"""The idle monitor's process settings. The monitor timings (IDLE_MINUTES, CHECK_SECONDS, …) are guard values
parsed by the never-widening option policy: a bad one keeps its default and warns."""

from __future__ import annotations

from pydantic import Field

from thermostat.chassis.registry import IDLE_MONITOR, POD_CONTROLLER
from thermostat.chassis.settings import ServiceSettings


class IdleMonitorSettings(ServiceSettings):
    idle_monitor_port: int = Field(default=IDLE_MONITOR.default_port, ge=0, le=65535)
    pod_controller_addr: str = Field(default=POD_CONTROLLER.address(), min_length=3)
    monitor_lease_seconds: float = Field(default=30.0, gt=0.2, le=3600)
    scrape_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    controller_timeout_seconds: float = Field(default=30.0, gt=0, le=300)
    store_read_timeout_seconds: float = Field(default=1.5, gt=0, le=30)  # GetMonitorState's read of the state
    # how often the controller is asked again about a pod not watched yet (unconfigured, unknown, no answer)
    monitor_recheck_seconds: float = Field(default=5.0, gt=0, le=3600)
    # set: each tick of a billing pod asks metering whether its budget is exhausted (then: a budget stop)
    metering_addr: str | None = None
