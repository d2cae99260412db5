"""A Docker machine's confinement: which relaxations a type may ask for, one rule per test."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.hardening import (
    ADDABLE_CAPABILITIES,
    capability_refusal,
    runtime_refusal,
    scratch_mount,
    user_refusal,
)


@pytest.mark.parametrize(
    ("user", "refused"),
    [
        pytest.param("65534:65534", None, id="nobody-the-default"),
        pytest.param("worker", None, id="a-name"),
        pytest.param("10001:10001", None, id="numbers"),
        pytest.param("root", "must not be root", id="root"),
        pytest.param("0", "must not be root", id="uid-0"),
        pytest.param("00", "must not be root", id="uid-0-padded"),
        pytest.param("1000:root", "must not be root", id="group-root"),
        pytest.param("1000:", "must be user or user:group", id="empty-group"),
        pytest.param("-u", "must be user or user:group", id="an-option"),
    ],
)
def test_a_user_is_a_name_or_number_never_root(user: str, refused: str | None) -> None:
    """`user[:group]`; uid or gid 0, by name or number, is refused."""
    problem = user_refusal(user)
    assert (problem is None) if refused is None else (problem is not None and refused in problem)


def test_a_type_may_add_back_only_what_docker_grants_by_default() -> None:
    """Docker's default set is addable; SYS_ADMIN and its like never are, and a CAP_ prefix is not read."""
    assert all(capability_refusal(name) is None for name in ADDABLE_CAPABILITIES)
    for name in ("SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "SYS_MODULE", "CAP_CHOWN", "ALL"):
        assert capability_refusal(name) is not None, name


def test_a_runtime_the_daemon_does_not_list_is_refused_naming_those_it_has() -> None:
    """The refusal lists the daemon's runtimes, sorted, so the admin sees what to name."""
    assert runtime_refusal("runc", {"runc", "io.containerd.runc.v2"}) is None
    assert runtime_refusal("runsc", {"runc", "io.containerd.runc.v2"}) == (
        "the Docker daemon has no runtime 'runsc'; it has: io.containerd.runc.v2, runc"
    )
    assert runtime_refusal("runsc", ()) == "the Docker daemon has no runtime 'runsc'; it has: none"


def test_scratch_is_a_bounded_tmp_without_devices_or_setuid() -> None:
    assert scratch_mount(64) == {"/tmp": "rw,nosuid,nodev,size=64m"}
