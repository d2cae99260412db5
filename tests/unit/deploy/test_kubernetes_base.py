"""deploy/k8s/ is a kustomize base of plain resources that validate against the Kubernetes schemas, reference
their Secrets, and agree with the service registry; each check catches the mistake it exists for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from thermostat.chassis.registry import SERVICES
from tools import deploy_check
from tools import k8s_manifests as gen

Resources = list[deploy_check.Resource]


def find(resources: Resources, kind: str, name: str) -> dict[str, Any]:
    return next(r.doc for r in resources if r.key == (kind, name))


def container(resources: Resources, name: str) -> dict[str, Any]:
    return find(resources, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]


def env(resources: Resources, name: str, var: str) -> dict[str, Any]:
    return next(e for e in container(resources, name)["env"] if e["name"] == var)


def test_the_base_lists_exactly_the_files_beside_it_and_nothing_but_resources(kustomization, on_disk) -> None:
    assert deploy_check.kustomization_problems(kustomization, on_disk) == []
    assert set(kustomization) == {"apiVersion", "kind", "resources"}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(
            lambda k, d: d.append("extra.yaml"), "extra.yaml is in deploy/k8s/ but not in", id="unlisted-file"
        ),
        pytest.param(lambda k, d: d.remove("edge.yaml"), "lists edge.yaml, which does not exist", id="missing-file"),
        pytest.param(lambda k, d: k["resources"].append("config.yaml"), "lists config.yaml twice", id="listed-twice"),
        pytest.param(lambda k, d: k.update(patches=[]), "patches makes it more than a plain resource list", id="patch"),
        pytest.param(lambda k, d: k.update(configMapGenerator=[]), "configMapGenerator makes it more", id="generator"),
    ],
)
def test_a_kustomization_that_is_not_the_plain_list_of_its_files_is_named(
    kustomization, on_disk, change: Callable[[dict, list], None], problem: str
) -> None:
    change(kustomization, on_disk)
    assert any(problem in p for p in deploy_check.kustomization_problems(kustomization, on_disk))


def test_every_listed_resource_validates_strictly_against_the_bundled_kubernetes_schemas(resources) -> None:
    assert deploy_check.schema_problems(resources) == []
    kinds = sorted({r.key[0] for r in resources})
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "Job",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "PrometheusRule",
        "Service",
    ]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(
            lambda r: find(r, "Deployment", "metering")["spec"].update(replicaz=2),
            "'replicaz' was unexpected",
            id="misspelt-field",
        ),
        pytest.param(
            lambda r: container(r, "pod-controller")["readinessProbe"]["grpc"].update(port="50061"),
            "readinessProbe.grpc.port",
            id="probe-port-not-a-number",
        ),
        pytest.param(
            lambda r: find(r, "PodDisruptionBudget", "edge")["spec"].update(minAvailable=[1]),
            "minAvailable",
            id="budget-of-the-wrong-type",
        ),
    ],
)
def test_a_resource_the_api_server_would_refuse_is_named_with_its_field(
    resources, change: Callable[[Resources], None], problem: str
) -> None:
    change(resources)
    assert any(problem in p for p in deploy_check.schema_problems(resources))


def test_secrets_are_referenced_never_written(resources) -> None:
    assert deploy_check.secret_problems(resources) == []
    assert env(resources, "pod-controller", "RUNPOD_API_KEY")["valueFrom"] == {
        "secretKeyRef": {"name": "thermostat-runpod", "key": "runpod-api-key", "optional": True}
    }
    assert {"secretRef": {"name": "thermostat-database"}} in container(resources, "metering")["envFrom"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(
            lambda r: env(r, "pod-controller", "RUNPOD_API_KEY").update(value="rpa_123", valueFrom=None),
            "RUNPOD_API_KEY holds a literal value",
            id="literal-key",
        ),
        pytest.param(
            lambda r: r.append(deploy_check.Resource("x.yaml", {"kind": "Secret", "metadata": {"name": "db"}})),
            "Secret db: a Secret's values are never committed",
            id="secret-resource",
        ),
        pytest.param(
            lambda r: find(r, "ConfigMap", "thermostat-config")["data"].update(STRATA_POOL_TOKEN="t"),
            "holds STRATA_POOL_TOKEN",
            id="token-in-configmap",
        ),
    ],
)
def test_a_secret_written_into_the_base_is_named(resources, change: Callable[[Resources], None], problem: str) -> None:
    change(resources)
    assert any(problem in p for p in deploy_check.secret_problems(resources))


def test_every_registered_service_and_the_edge_agree_with_the_registry(resources) -> None:
    assert deploy_check.registry_problems(resources) == []
    for service in SERVICES:
        assert find(resources, "Deployment", service.name)["spec"]["replicas"] == 2
        probes = container(resources, service.name)
        assert probes["readinessProbe"]["grpc"] == {"port": service.default_port, "service": service.health_service}
    assert find(resources, "Deployment", "edge")["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(
            lambda r: find(r, "Deployment", "idle-monitor")["spec"].update(replicas=1),
            "Deployment idle-monitor: replicas 1",
            id="one-replica",
        ),
        pytest.param(
            lambda r: env(r, "metering", "METERING_PORT").update(value="50099"),
            "METERING_PORT is not 50064",
            id="port-variable",
        ),
        pytest.param(
            lambda r: container(r, "pool-dispatcher")["ports"][0].update(containerPort=8080),
            "container port is not the registry's 50063",
            id="container-port",
        ),
        pytest.param(
            lambda r: container(r, "pod-controller")["readinessProbe"]["grpc"].update(service=""),
            "readinessProbe is not grpc.health.v1 on port 50061 for 'thermostat.pods.v1.PodController'",
            id="readiness-on-overall-health",
        ),
        pytest.param(
            lambda r: container(r, "pod-controller")["livenessProbe"]["grpc"].pop("service"),
            "livenessProbe is not grpc.health.v1 on port 50061 for 'liveness'",
            id="liveness-following-the-store",
        ),
        pytest.param(
            lambda r: container(r, "metering").update(image="thermostat:old"),
            "image 'thermostat:old'",
            id="image",
        ),
        pytest.param(
            lambda r: container(r, "metering").update(command=["python", "-m", "thermostat.idle_monitor"]),
            "does not run thermostat.metering",
            id="command",
        ),
        pytest.param(
            lambda r: container(r, "metering")["resources"].pop("limits"),
            "resources need",
            id="no-limits",
        ),
        pytest.param(
            lambda r: r.remove(next(x for x in r if x.key == ("PodDisruptionBudget", "metering"))),
            "PodDisruptionBudget metering: missing",
            id="no-budget",
        ),
        pytest.param(
            lambda r: find(r, "NetworkPolicy", "metering")["spec"]["ingress"][0]["ports"][0].update(port=1),
            "NetworkPolicy metering: missing or not admitting port 50064",
            id="policy-port",
        ),
        pytest.param(
            lambda r: find(r, "NetworkPolicy", "metering")["spec"]["ingress"][0].update({"from": [{}]}),
            "port 50064 is admitted to more than pods labelled as the edge or a service",
            id="policy-open-to-all",
        ),
        pytest.param(
            lambda r: find(r, "ConfigMap", "thermostat-edge")["data"].update(
                {
                    "envoy.yaml": find(r, "ConfigMap", "thermostat-edge")["data"]["envoy.yaml"].replace(
                        '"address": "metering"', '"address": "metering.other"'
                    )
                }
            ),
            "cluster metering is {'address': 'metering.other', 'port_value': 50064}",
            id="edge-cluster-elsewhere",
        ),
        pytest.param(
            lambda r: find(r, "ConfigMap", "thermostat-config")["data"].pop("METERING_ADDR"),
            "METERING_ADDR is not metering:50064",
            id="address",
        ),
        pytest.param(
            lambda r: r.remove(next(x for x in r if x.key == ("Job", "thermostat-migrate"))),
            "no migration Job",
            id="no-migration-job",
        ),
        pytest.param(
            lambda r: find(r, "Deployment", "edge")["spec"]["template"]["metadata"]["labels"].pop("thermostat/role"),
            "its pods need thermostat/role: edge",
            id="edge-unlabelled",
        ),
        pytest.param(
            lambda r: container(r, "edge").update(volumeMounts=[]),
            "Envoy reads /etc/envoy/thermostat.pb, which the pod does not mount",
            id="descriptor-not-mounted",
        ),
    ],
)
def test_a_base_that_disagrees_with_the_registry_is_named(
    resources, change: Callable[[Resources], None], problem: str
) -> None:
    change(resources)
    assert any(problem in p for p in deploy_check.registry_problems(resources)), deploy_check.registry_problems(
        resources
    )


def test_the_edge_config_map_holds_the_generated_config_and_the_descriptor_set_envoy_reads(resources) -> None:
    config_map = find(resources, "ConfigMap", "thermostat-edge")
    assert config_map["data"]["envoy.yaml"] == gen.edge_config()
    assert set(config_map["binaryData"]) == {"thermostat.pb"}
    pod = find(resources, "Deployment", "edge")["spec"]["template"]
    assert pod["spec"]["volumes"] == [{"name": "config", "configMap": {"name": "thermostat-edge"}}]
    assert container(resources, "edge")["command"][:3] == ["envoy", "-c", "/etc/envoy/envoy.yaml"]


def test_a_changed_edge_config_changes_the_pod_template_so_the_edge_rolls(scratch: Path) -> None:
    """The hash annotation follows the config and the descriptors: an apply with a new config restarts Envoy."""
    before = gen.render()[gen.Path("deploy/k8s/edge.yaml")]
    widened = scratch / "thermostat.pb"
    widened.write_bytes(gen.DESCRIPTOR_SET.read_bytes())
    assert gen.render(descriptor_set=widened)[gen.Path("deploy/k8s/edge.yaml")] == before
    from google.protobuf import descriptor_pb2

    files = descriptor_pb2.FileDescriptorSet.FromString(widened.read_bytes())
    files.file[-1].options.java_package = "changed"  # any change Envoy would see
    widened.write_bytes(files.SerializeToString())
    assert gen.render(descriptor_set=widened)[gen.Path("deploy/k8s/edge.yaml")] != before


def test_the_migration_job_runs_the_migration_step_with_the_database_secret(resources) -> None:
    job = find(resources, "Job", "thermostat-migrate")["spec"]
    (step,) = job["template"]["spec"]["containers"]
    assert step["command"] == ["python", "-m", "thermostat.store.migrate"]
    assert step["envFrom"] == [{"secretRef": {"name": "thermostat-database"}}]
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    assert job["ttlSecondsAfterFinished"] > 0  # gone after a while, so the next apply runs it again


def test_each_pool_dispatcher_pod_is_its_own_instance_by_its_name(resources: Resources) -> None:
    """POOL_INSTANCE_ID from the pod's name (the downward API): readable owners, and a restarted pod a new id."""
    assert env(resources, "pool-dispatcher", "POOL_INSTANCE_ID")["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.name"}
    }


def test_the_pool_dispatchers_termination_grace_covers_its_drain(resources: Resources) -> None:
    """A deploy's SIGTERM drains in-flight jobs for POOL_SHUTDOWN_GRACE_SECONDS; the pod is killed only after that,
    with room for the release; the manifest's figure is the setting's default."""
    from thermostat.pool_dispatcher.settings import PoolDispatcherSettings

    pod = find(resources, "Deployment", "pool-dispatcher")["spec"]["template"]["spec"]
    drain = float(env(resources, "pool-dispatcher", "POOL_SHUTDOWN_GRACE_SECONDS")["value"])
    assert drain == PoolDispatcherSettings.model_fields["pool_shutdown_grace_seconds"].default
    assert pod["terminationGracePeriodSeconds"] >= drain + 10
