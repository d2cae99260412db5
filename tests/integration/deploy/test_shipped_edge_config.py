"""The edge config the deployment ships is one the real Envoy (the version the cluster and compose run) accepts,
with the descriptor set shipped beside it: the ConfigMap's envoy.yaml and binaryData as the pod mounts them,
and compose's deploy/edge/envoy.yaml."""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from thermostat.dev.envoy import EnvoyError, validate_config
from tools import k8s_manifests as gen


@pytest.fixture
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="thermostat-edge-") as path:
        yield Path(path)


def _mounted(scratch: Path, config: str, descriptors: bytes) -> Path:
    """`config` and `descriptors` as the pod sees them, with the mount moved under `scratch`."""
    mount = scratch / "etc-envoy"
    mount.mkdir()
    (mount / "thermostat.pb").write_bytes(descriptors)
    path = mount / "envoy.yaml"
    path.write_text(config.replace(f'"{gen.EDGE_MOUNT}/', f'"{mount}/'))
    return path


def _config_map() -> dict:
    return yaml.safe_load((gen.K8S / "edge-config.yaml").read_text())


def test_envoy_accepts_the_config_map_with_its_descriptor_set(scratch: Path) -> None:
    config_map = _config_map()
    descriptors = base64.b64decode(config_map["binaryData"]["thermostat.pb"])
    validate_config(_mounted(scratch, config_map["data"]["envoy.yaml"], descriptors))


def test_compose_edge_config_is_the_cluster_one_and_envoy_accepts_it_with_the_built_descriptors(scratch) -> None:
    """The compose edge image pairs deploy/edge/envoy.yaml with the image build's descriptor set (with source
    info: build/thermostat.pb as `make proto` writes it)."""
    config = (gen.DEPLOY / "edge" / "envoy.yaml").read_text()
    assert config == _config_map()["data"]["envoy.yaml"]
    validate_config(_mounted(scratch, config, gen.DESCRIPTOR_SET.read_bytes()))


def test_the_shipped_config_listens_on_every_interface_and_routes_each_service_by_name() -> None:
    config = json.loads(_config_map()["data"]["envoy.yaml"])
    listeners = {listener["name"]: listener for listener in config["static_resources"]["listeners"]}
    assert listeners["edge"]["address"]["socket_address"] == {"address": "0.0.0.0", "port_value": gen.EDGE_PORT}
    # Prometheus scrapes the edge's stats from another pod; the admin interface itself stays on loopback
    (stats,) = [listener for name, listener in listeners.items() if name != "edge"]
    assert stats["address"]["socket_address"] == {"address": "0.0.0.0", "port_value": 9902}
    assert config["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    clusters = {c["name"]: c["type"] for c in config["static_resources"]["clusters"]}
    assert {name: clusters.get(name) for name in ("pod-controller", "idle-monitor", "pool-dispatcher", "metering")} == {
        "pod-controller": "STRICT_DNS",
        "idle-monitor": "STRICT_DNS",
        "pool-dispatcher": "STRICT_DNS",
        "metering": "STRICT_DNS",
    }


def test_a_descriptor_set_that_lacks_the_routed_services_is_refused_by_envoy(scratch: Path) -> None:
    """The check above can fail: Envoy refuses the config when the descriptors do not hold what it transcodes."""
    config_map = _config_map()
    with pytest.raises(EnvoyError, match="rejected"):
        validate_config(_mounted(scratch, config_map["data"]["envoy.yaml"], b""))
