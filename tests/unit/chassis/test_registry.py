"""The service registry is the one list of services: everything derived from it agrees with it."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest
import yaml
from google.api import annotations_pb2
from google.protobuf import descriptor_pool

from thermostat.chassis.registry import PROGRAMS, SERVICES, ServiceDef, public_services, reflecting
from thermostat.chassis.settings import ServiceSettings
from tools import k8s_manifests
from tools.envoy_config import SEED_FAMILIES, upstreams

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = sorted(s.package for s in SERVICES)
RUNNABLE = sorted([*PACKAGES, *PROGRAMS])
BY_NAME = pytest.mark.parametrize("service", SERVICES, ids=[s.name for s in SERVICES])


def _contract(name: str) -> dict[str, object]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["name"] == name)


def _service_descriptor(full_name: str):  # type: ignore[no-untyped-def]
    package = full_name.rsplit(".", 1)[0]  # thermostat.pods.v1
    for module in (ROOT / "libs" / Path(*package.split("."))).glob("*_pb2.py"):
        importlib.import_module(f"{package}.{module.stem}")
    return descriptor_pool.Default().FindServiceByName(full_name)


def test_every_service_package_under_services_is_registered_and_every_entry_has_one() -> None:
    on_disk = sorted(
        f"thermostat.{p.name}" for p in (ROOT / "services" / "thermostat").iterdir() if (p / "__main__.py").is_file()
    )
    assert on_disk == RUNNABLE


def test_the_import_contracts_list_exactly_the_registered_services() -> None:
    assert sorted(_contract("services never import each other")["modules"]) == RUNNABLE  # type: ignore[arg-type]
    assert sorted(_contract("libs never import services")["forbidden_modules"]) == RUNNABLE  # type: ignore[arg-type]
    assert sorted(_contract("services reach the database only through their repository")["source_modules"]) == PACKAGES  # type: ignore[arg-type]
    assert sorted(_contract("services import only the house's runtime libraries")["source_modules"]) == PACKAGES  # type: ignore[arg-type]
    runtime = _contract("runtime never imports dev tooling")["source_modules"]
    assert set(PACKAGES) <= set(runtime)  # type: ignore[arg-type]


def test_the_committed_deployment_is_what_the_registry_generates() -> None:
    """Run `make k8s` after changing the registry (or tools/k8s_manifests.py, or a proto the edge routes)."""
    assert k8s_manifests.stale(k8s_manifests.render()) == []


@BY_NAME
def test_a_service_reads_its_port_from_the_registry_variable_and_defaults_to_the_registry_port(
    service: ServiceDef,
) -> None:
    module = importlib.import_module(f"{service.package}.settings")
    (settings,) = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, ServiceSettings) and v is not ServiceSettings
    ]
    field = settings.model_fields[service.port_env.lower()]
    assert field.default == service.default_port


@BY_NAME
def test_every_named_grpc_service_exists_and_health_names_a_served_one(service: ServiceDef) -> None:
    for name in service.served:
        assert _service_descriptor(name).full_name == name
    assert service.health_service in service.served


@BY_NAME
def test_public_rest_routes_start_with_the_registered_prefixes_inside_an_edge_json_family(
    service: ServiceDef,
) -> None:
    families = [f.prefix for f in SEED_FAMILIES]
    assert all(any(p.startswith(f) for f in families) for p in service.rest_prefixes)
    for name in service.public_services:
        for method in _service_descriptor(name).methods:
            rule = method.GetOptions().Extensions[annotations_pb2.http]
            path = getattr(rule, rule.WhichOneof("pattern")) if rule.WhichOneof("pattern") else None
            if path is not None:
                assert path.startswith(service.rest_prefixes), f"{name}.{method.name}: {path}"


@BY_NAME
def test_internal_services_have_no_rest_route(service: ServiceDef) -> None:
    for name in service.internal_services:
        for method in _service_descriptor(name).methods:
            assert not method.GetOptions().HasExtension(annotations_pb2.http), f"{name}.{method.name}"


def test_names_ports_and_edge_routes_are_unique_and_one_service_answers_reflection() -> None:
    assert len({s.name for s in SERVICES}) == len({s.default_port for s in SERVICES}) == len(SERVICES)
    assert len(set(public_services())) == len(public_services())
    assert reflecting() is not None
    assert sum(s.reflection for s in SERVICES) == 1


def test_the_edge_routes_public_services_only_to_each_service_by_its_kubernetes_name() -> None:
    assert [(u.cluster, u.host, u.port, u.services) for u in upstreams()] == [
        (s.name, s.name, s.default_port, s.public_services) for s in SERVICES
    ]


@BY_NAME
def test_every_service_reads_the_internal_token_from_its_secret_and_admits_only_the_edge_and_services(
    service: ServiceDef,
) -> None:
    """Each Deployment gets THERMOSTAT_INTERNAL_TOKEN from the required Secret; its NetworkPolicy admits only
    pods labelled as the edge or a service, on its own port; each service's pods carry the service label."""
    documents = {
        (d["kind"], d["metadata"]["name"]): d
        for d in yaml.safe_load_all(k8s_manifests.render()[Path("deploy/k8s") / f"{service.name}.yaml"])
        if d
    }
    pod = documents["Deployment", service.name]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    token = next(e for e in container["env"] if e["name"] == "THERMOSTAT_INTERNAL_TOKEN")
    assert token["valueFrom"] == {"secretKeyRef": {"name": "thermostat-internal", "key": "internal-token"}}
    assert pod["metadata"]["labels"] == {"app": service.name, "thermostat/role": "service"}
    policy = documents["NetworkPolicy", service.name]["spec"]
    assert policy["podSelector"] == {"matchLabels": {"app": service.name}}
    assert policy["ingress"] == [
        {
            "from": [
                {
                    "podSelector": {
                        "matchExpressions": [
                            {"key": "thermostat/role", "operator": "In", "values": ["edge", "service"]}
                        ]
                    }
                }
            ],
            # a service's own HTTP API (the gateway's) is reached by the edge as its gRPC port is
            "ports": [
                {"port": port, "protocol": "TCP"}
                for port in (service.default_port, service.default_http_port if service.http_port_env else 0)
                if port
            ],
        },
        {
            "from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"thermostat/role": "prometheus"}}}],
            "ports": [{"port": service.default_metrics_port, "protocol": "TCP"}],
        },
    ]


def test_every_port_of_the_house_is_distinct_metrics_ports_included() -> None:
    ports = [p for s in SERVICES for p in (s.default_port, s.default_metrics_port)]
    assert len(set(ports)) == len(ports)
    assert len({s.metrics_port_env for s in SERVICES}) == len(SERVICES)


@BY_NAME
def test_every_deployment_exposes_its_metrics_port_to_prometheus(service: ServiceDef) -> None:
    documents = {
        (d["kind"], d["metadata"]["name"]): d
        for d in yaml.safe_load_all(k8s_manifests.render()[Path("deploy/k8s") / f"{service.name}.yaml"])
        if d
    }
    pod = documents["Deployment", service.name]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert {"containerPort": service.default_metrics_port, "name": "metrics"} in container["ports"]
    assert pod["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(service.default_metrics_port),
        "prometheus.io/path": "/metrics",
    }
