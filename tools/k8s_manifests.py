"""Write deploy/k8s/thermostat.yaml from the service registry (`make k8s`).

Every registered service gets a Deployment (its package as the command, its port, the internal token from
the `thermostat-internal` Secret, gRPC readiness and liveness probes on its health service), a Service and a
NetworkPolicy admitting only the edge and the services to its port; a service with internal gRPC services is called by
other services, so its address (POD_CONTROLLER_ADDR) goes into the shared ConfigMap. The output is
committed; tests/unit/chassis/test_registry.py fails when it differs from what this writes.

`python tools/k8s_manifests.py --check` exits 1 when the committed file is stale.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.registry import SERVICES, ServiceDef

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "deploy" / "k8s" / "thermostat.yaml"
IMAGE = "thermostat:latest"
ENV_FROM = "thermostat-database"  # the required Secret every service reads DATABASE_URL from (managed outside)
RUNPOD_SECRET = "thermostat-runpod"  # noqa: S105 -- a Secret's name; optional: the RunPod key and tokens
INTERNAL_SECRET = "thermostat-internal"  # noqa: S105 -- a Secret's name; required: the services' internal token
ROLE = "thermostat/role"  # the label NetworkPolicies select on: `service` for every service, `edge` for Envoy
PROMETHEUS_ROLE = "prometheus"  # ROLE's value on the Prometheus pods admitted to each service's metrics port

HEADER = """\
# Thermostat on Kubernetes: two replicas of each service over one Postgres (DATABASE_URL), gRPC health probes,
# Envoy as the ingress. Three Secrets, all managed outside this repository:
# - `thermostat-database` (DATABASE_URL), required: without a store no service can start.
# - `thermostat-runpod` (keys runpod-api-key, rig-operator-token, rig-wake-token), referenced with
#   `optional: true` (pod-control seed: Disabled-until-configured), so everything boots before it is provisioned:
#   GET answers configured:false, start/stop are refused (401/403 while no operator token exists, else 503), no
#   call reaches RunPod, and the idle monitor stays up watching nothing. The controller reads the key at start, so
#   once the Secret exists: `kubectl rollout restart deployment/pod-controller`. The monitor needs no restart: it
#   asks the controller again every MONITOR_RECHECK_SECONDS and starts watching a pod once the controller reports
#   it configured.
# - `thermostat-internal` (key internal-token), required: THERMOSTAT_INTERNAL_TOKEN, which every service-to-service
#   call carries and every internal RPC requires (no token: internal calls are refused, so it is not optional).
#   `kubectl create secret generic thermostat-internal --from-literal=internal-token=$(openssl rand -base64 32)`
# NetworkPolicies admit to each service's port only pods labelled thermostat/role: service (every service here)
# or thermostat/role: edge (label the Envoy edge's pods so). Kubelet probes come from the node and are not
# subject to them on the common CNIs. Each service serves Prometheus's /metrics on its metrics port (annotated
# prometheus.io/*), admitted from pods labelled thermostat/role: prometheus in any namespace.
# Written by `make k8s` (tools/k8s_manifests.py) from the service registry (thermostat.chassis.registry):
# change those, not this file.
"""

# The deployment's configuration, shared by every service (the services' addresses are appended).
CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: thermostat-config}
data:
  RUNPOD_POD_NAME: qwen
  RUNPOD_VOLUME_ID: bjn7d94ej9
  RUNPOD_TEMPLATE_ID: cnz5fxyadi
  RUNPOD_DATACENTER_ID: EU-RO-1
  # The wake's single point of failure (2026-09-11, rig-conductor#2093): 1.00 excludes nearly every card
  # that holds a 32B model. Read the incident before lowering it.
  RUNPOD_MAX_PRICE_PER_HOUR: "2.00"
  IDLE_MINUTES: "15"
  CHECK_SECONDS: "60"
  MAX_RUNTIME_MINUTES: "360"
  RUNPOD_BOOT_GRACE_MINUTES: "20"
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    """How a service runs in the cluster where it differs from the defaults: replicas, stop grace, its own env.

    `env` holds YAML list items (one string each; a multi-line item's later lines are indented under the first).
    """

    replicas: int = 2
    replicas_note: str = ""
    termination_grace_seconds: int | None = None
    termination_note: str = ""
    env: tuple[str, ...] = ()
    env_from_note: str = ""


ROLLOUTS = {
    "pod-controller": Rollout(
        termination_grace_seconds=330,
        termination_note="a wake in flight may poll for 300 s; it is drained, not cut",
        env=(
            '{name: SHUTDOWN_GRACE_SECONDS, value: "300"}',
            *(
                f"name: {var}\nvalueFrom: {{secretKeyRef: {{name: {RUNPOD_SECRET}, key: {key}, optional: true}}}}"
                for var, key in (
                    ("RUNPOD_API_KEY", "runpod-api-key"),
                    ("RIG_OPERATOR_TOKEN", "rig-operator-token"),
                    ("RIG_WAKE_TOKEN", "rig-wake-token"),
                )
            ),
        ),
    ),
    "idle-monitor": Rollout(
        replicas_note="one ticks each pod (a lease); the other takes over within MONITOR_LEASE_SECONDS",
        env_from_note="no RunPod key here: the controller is the one judge of whether a pod is configured",
    ),
    "metering": Rollout(
        replicas_note="one ingests the ledger (a lease); both answer spend and budget reads",
        env=(
            f"name: RIG_OPERATOR_TOKEN\nvalueFrom: {{secretKeyRef: {{name: {RUNPOD_SECRET}, key: rig-operator-token, "
            "optional: true}}",
        ),
    ),
}


def _note(text: str, width: int) -> str:
    return f"{' ' * width}# {text}" if text else ""


def _deployment(service: ServiceDef, rollout: Rollout) -> str:
    name, port, metrics = service.name, service.default_port, service.default_metrics_port
    lines = [
        "apiVersion: apps/v1",
        "kind: Deployment",
        f"metadata: {{name: {name}}}",
        "spec:",
        f"  replicas: {rollout.replicas}{_note(rollout.replicas_note, 3)}",
        f"  selector: {{matchLabels: {{app: {name}}}}}",
        "  template:",
        "    metadata:",
        f"      labels: {{app: {name}, {ROLE}: service}}",
        f"      annotations: {_scrape(service)}",
        "    spec:",
    ]
    if rollout.termination_grace_seconds is not None:
        lines.append(
            f"      terminationGracePeriodSeconds: {rollout.termination_grace_seconds}"
            f"{_note(rollout.termination_note, 3)}"
        )
    lines += [
        "      containers:",
        f"      - name: {name}",
        f"        image: {IMAGE}",
        f"        command: [python, -m, {service.package}]",
    ]
    lines.append("        env:")
    for item in (INTERNAL_TOKEN, *rollout.env):
        first, *rest = item.splitlines()
        lines += [f"        - {first}", *(f"          {line}" for line in rest)]
    if rollout.env_from_note:
        lines.append(f"        # {rollout.env_from_note}")
    lines += [
        f"        envFrom: [{{configMapRef: {{name: thermostat-config}}}}, {{secretRef: {{name: {ENV_FROM}}}}}]",
        f"        ports: [{{containerPort: {port}, name: grpc}}, {{containerPort: {metrics}, name: metrics}}]",
        f"        readinessProbe: {{grpc: {{port: {port}, service: {service.health_service}}}, periodSeconds: 5}}",
        f"        livenessProbe: {{grpc: {{port: {port}}}, periodSeconds: 10, failureThreshold: 6}}",
    ]
    return "\n".join(lines) + "\n"


INTERNAL_TOKEN = (
    f"name: {INTERNAL_TOKEN_ENV}\nvalueFrom: {{secretKeyRef: {{name: {INTERNAL_SECRET}, key: internal-token}}}}"
)


def _scrape(service: ServiceDef) -> str:
    """The pod annotations Prometheus's kubernetes-pods scrape config reads: where /metrics is."""
    return (
        f'{{prometheus.io/scrape: "true", prometheus.io/port: "{service.default_metrics_port}", '
        "prometheus.io/path: /metrics}"
    )


def _network_policy(service: ServiceDef) -> str:
    """Only the edge and the services reach a service's port; Prometheus (any namespace) its metrics port."""
    name = service.name
    return (
        "apiVersion: networking.k8s.io/v1\n"
        "kind: NetworkPolicy\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n"
        f"  podSelector: {{matchLabels: {{app: {name}}}}}\n"
        "  policyTypes: [Ingress]\n"
        "  ingress:\n"
        f"  - from: [{{podSelector: {{matchExpressions: [{{key: {ROLE}, operator: In, values: [edge, service]}}]}}}}]\n"
        f"    ports: [{{port: {service.default_port}, protocol: TCP}}]\n"
        f"  - from: [{{namespaceSelector: {{}}, podSelector: {{matchLabels: {{{ROLE}: {PROMETHEUS_ROLE}}}}}}}]\n"
        f"    ports: [{{port: {service.default_metrics_port}, protocol: TCP}}]\n"
    )


def _service(service: ServiceDef) -> str:
    name = service.name
    return (
        "apiVersion: v1\n"
        "kind: Service\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n"
        f"  selector: {{app: {name}}}\n"
        f"  ports: [{{port: {service.default_port}, targetPort: grpc, name: grpc, appProtocol: kubernetes.io/h2c}}]\n"
    )


def render(services: tuple[ServiceDef, ...] = SERVICES) -> str:
    """The manifest for `services`: the shared ConfigMap, then a Deployment and a Service per service."""
    # In the cluster a service is reached by its Kubernetes Service name on its registry port.
    addresses = "".join(f"  {s.address_env}: {s.address(host=s.name)}\n" for s in services if s.internal_services)
    documents = [CONFIG + addresses]
    for service in services:
        documents += [
            _deployment(service, ROLLOUTS.get(service.name, Rollout())),
            _service(service),
            _network_policy(service),
        ]
    return HEADER + "---\n".join(documents)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if MANIFEST.read_text(encoding="utf-8") != text:
            print(f"{MANIFEST.relative_to(ROOT)} is stale: run `make k8s`", file=sys.stderr)
            return 1
        return 0
    MANIFEST.write_text(text, encoding="utf-8")
    print(f"k8s: wrote {MANIFEST.relative_to(ROOT)} ({len(SERVICES)} services)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
