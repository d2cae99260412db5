"""The committed deployment, parsed once per test (each test may mutate its copy)."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tools import deploy_check
from tools import k8s_manifests as gen

_KUSTOMIZATION, _ON_DISK, _RESOURCES = deploy_check.load_base()
_COMPOSE = yaml.safe_load((gen.DEPLOY / "compose.yaml").read_text())


@pytest.fixture
def resources() -> list[deploy_check.Resource]:
    return copy.deepcopy(_RESOURCES)


@pytest.fixture
def kustomization() -> dict:
    return copy.deepcopy(_KUSTOMIZATION)


@pytest.fixture
def on_disk() -> list[str]:
    return list(_ON_DISK)


@pytest.fixture
def compose() -> dict:
    return copy.deepcopy(_COMPOSE)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory of the test's own, outside pytest's shared base temp (which concurrent sessions on this machine
    reset under each other)."""
    with tempfile.TemporaryDirectory(prefix="thermostat-deploy-") as path:
        yield Path(path)
