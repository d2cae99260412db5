"""What the stack's children start with (issue 35: gRPC's fork_posix.cc line printed at every local machine start)."""

from __future__ import annotations

from thermostat.dev.stack.supervisor import children_env


def test_the_children_run_without_grpcs_fork_handlers_unless_asked() -> None:
    """They fork only to exec; a value set before make run is kept."""
    assert children_env({}, {}, "postgresql://db")["GRPC_ENABLE_FORK_SUPPORT"] == "0"
    assert children_env({"GRPC_ENABLE_FORK_SUPPORT": "1"}, {}, "x")["GRPC_ENABLE_FORK_SUPPORT"] == "1"


def test_the_stacks_own_settings_win_only_where_unset() -> None:
    env = children_env({"POOL_ENABLED_BACKENDS": "local"}, {"EXTRA": "1"}, "postgresql://db")
    assert (env["POOL_ENABLED_BACKENDS"], env["EXTRA"], env["DATABASE_URL"]) == ("local", "1", "postgresql://db")
