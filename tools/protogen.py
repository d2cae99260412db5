"""Generate Python code, .pyi stubs and descriptor sets from the .proto sources (`make proto`).

Generated files are build outputs: protos/ → libs/ (so `thermostat.pods.v1` lands beside the libraries in
one namespace), tests/protos/ → tests/gen/. Each tree also gets a descriptor set with imports and source
info under build/, which is what Envoy's JSON transcoder reads.

A build tool, not runtime code and not dev tooling: `make proto` and the image build
(deploy/container/Dockerfile) both run it as a script (`python tools/protogen.py`) with the runtime
requirements alone (grpcio-tools and googleapis-common-protos are in requirements.txt).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import google.api
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"

# (proto root, python output root, descriptor set)
TREES = (
    (ROOT / "protos", ROOT / "libs", BUILD / "thermostat.pb"),
    (ROOT / "tests" / "protos", ROOT / "tests" / "gen", BUILD / "edgetest.pb"),
)


def _includes(proto_root: Path) -> list[str]:
    googleapis = Path(next(iter(google.api.__path__))).parents[1]  # site-packages holding google/api/*.proto
    wkt = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto ship with grpcio-tools
    return [f"-I{proto_root}", f"-I{googleapis}", f"-I{wkt}"]


def _run(args: list[str]) -> None:
    if protoc.main(["protoc", *args]) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")


def generate() -> None:
    BUILD.mkdir(exist_ok=True)
    for proto_root, out, descriptor_set in TREES:
        files = sorted(str(p.relative_to(proto_root)) for p in proto_root.rglob("*.proto"))
        if not files:
            continue
        out.mkdir(parents=True, exist_ok=True)
        inc = _includes(proto_root)
        _run([*inc, f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", *files])
        _run([*inc, "--include_imports", "--include_source_info", f"--descriptor_set_out={descriptor_set}", *files])
        print(
            f"proto: {len(files)} file(s) from {os.path.relpath(proto_root, ROOT)} → "
            f"{os.path.relpath(out, ROOT)}, {os.path.relpath(descriptor_set, ROOT)}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    generate()
