"""Small modules: no Python module of a service is over 500 lines (issue 22: a newcomer finds a rule by its
module's name, and a module that grows past a few hundred lines is holding more than one concern)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 500


def test_no_module_under_services_is_over_500_lines() -> None:
    """Generated code (the protobuf modules under */v1/) is not ours to split."""
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in (ROOT / "services").rglob("*.py")
        if "/v1/" not in path.as_posix()
    }
    assert sizes, "no service module found: the scan reads the wrong folder"
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
