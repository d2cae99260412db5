"""`thermostat.client` needs only grpcio, protobuf, googleapis-common-protos, the generated `thermostat.*.v1` code
and the standard library: imported (and a client built, both flavours) in a fresh interpreter where everything else
of this repository is off the path and the services' dependencies refuse to import, it works and loads none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# services/ and dev/ leave the path (a client install has libs/ only); an import hook refuses the services'
# third-party dependencies and every thermostat package but the client and the generated contracts.
_PROBE = """
import importlib.abc, json, re, sys
sys.path[:] = [p for p in sys.path if p.rstrip("/") not in {off!r}]
BLOCKED = ("pydantic", "pydantic_settings", "asyncpg", "httpx", "aiohttp", "uvloop", "opentelemetry", "psutil")
ALLOWED = re.compile(r"thermostat(\\.client(\\..*)?|\\.(pods|pool|metering|monitor)(\\.v1(\\..*)?)?)?")
refused = []

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BLOCKED or (top == "thermostat" and not ALLOWED.fullmatch(name)):
            refused.append(name)
            raise ImportError(f"{{name}} is not available to the client")
        return None

sys.meta_path.insert(0, Refuse())
from thermostat.client import AsyncThermostat, ClientConfig, Thermostat, errors
import asyncio

config = ClientConfig.from_env(target="127.0.0.1:1", timeout=1)
with Thermostat(config) as blocking:
    pass

async def build():
    async with AsyncThermostat(config) as client:
        return type(client.pool).__name__

asyncio.run(build())
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED or m.startswith("thermostat"))
print(json.dumps({{"refused": refused, "loaded": loaded}}))
"""


def test_the_client_imports_and_builds_with_only_grpc_protobuf_and_the_generated_code() -> None:
    probe = _PROBE.format(off=(str(ROOT / "services"), str(ROOT / "dev")))
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["refused"] == []
    beside_the_client = [m for m in report["loaded"] if not m.startswith("thermostat.client") and ".v1" not in m]
    assert beside_the_client == [  # the namespace packages the generated code sits in
        "thermostat",
        "thermostat.metering",
        "thermostat.monitor",
        "thermostat.pods",
        "thermostat.pool",
    ]


def test_the_probe_does_refuse_what_it_blocks() -> None:
    """The hook is live: a module the client must not need fails to import under it."""
    probe = _PROBE.format(off=(str(ROOT / "services"), str(ROOT / "dev"))).replace(
        "from thermostat.client import", "import pydantic\nfrom thermostat.client import"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode != 0 and "pydantic is not available to the client" in result.stderr
