"""The inference gateway's process settings (docs/gateway.md).

Tokens: THERMOSTAT_INFERENCE_TOKEN lets a caller send inference and, through it, wake a pod (never stop one or change
a budget); the operator token (RIG_OPERATOR_TOKEN) is accepted too. Neither set: every request is refused.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from thermostat.chassis.registry import GATEWAY, IDLE_MONITOR, POD_CONTROLLER
from thermostat.chassis.settings import ServiceSettings

# RunPod's proxy sits behind Cloudflare, which refuses scripted User-Agents (pod-control seed: the 403 of #2088)
BROWSER_USER_AGENT = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36 Thermostat"
)


class GatewaySettings(ServiceSettings):
    gateway_port: int = Field(default=GATEWAY.default_port, ge=0, le=65535)
    gateway_http_port: int = Field(default=GATEWAY.default_http_port, ge=0, le=65535)
    gateway_http_host: str = Field(default="127.0.0.1", description="address the OpenAI HTTP API binds")
    pod_controller_addr: str = Field(default=POD_CONTROLLER.address(), min_length=3)
    idle_monitor_addr: str = Field(default=IDLE_MONITOR.address(), min_length=3)
    thermostat_inference_token: SecretStr | None = None
    rig_operator_token: SecretStr | None = None
    # held requests a pod may have at once; past it a request is answered 503 with Retry-After
    gateway_max_held_per_pod: int = Field(default=64, ge=0, le=100_000)
    # how long a request is held for a waking pod; unset: the pod's boot grace (RUNPOD_BOOT_GRACE_MINUTES)
    gateway_wake_wait_seconds: float | None = Field(default=None, gt=0, le=24 * 3600)
    # a held stream gets an SSE comment line this often, so no proxy's first-byte limit (Cloudflare: 100 s) cuts it
    gateway_hold_comment_seconds: float = Field(default=10.0, gt=0, le=90)
    # how long the engine may take to accept the connection and answer headers (not the answer itself)
    gateway_connect_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    # a request finishing is reported to the idle monitor before the handler returns, bounded by this
    gateway_report_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    # an in-flight count lives this long in the monitor's store without a renewal (a dead gateway keeps no pod up)
    gateway_report_live_seconds: float = Field(default=60.0, gt=1, le=3600)
    controller_timeout_seconds: float = Field(default=30.0, gt=0, le=300)
    gateway_user_agent: str = BROWSER_USER_AGENT

    def inference_tokens(self) -> tuple[str | None, ...]:
        return tuple(
            t.get_secret_value() if t else None for t in (self.thermostat_inference_token, self.rig_operator_token)
        )
