"""`python -m thermostat.dev.engine install | status`: the real vLLM's environment (`make engine`)."""

from __future__ import annotations

import argparse
import sys

from thermostat.dev.engine.install import EngineInstallError, install
from thermostat.dev.engine.recipe import VENV_ENV, installation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m thermostat.dev.engine", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("install", "status"), help="install: once, idempotent; status: where")
    args = parser.parse_args(argv)
    target = installation()
    if args.command == "status":
        state = "installed" if target.ready else f"not installed (make engine; {VENV_ENV} to put it elsewhere)"
        print(f"engine | {target.venv}: {state}")
        return 0 if target.ready else 1
    try:
        install(target)
    except EngineInstallError as error:
        print(f"engine | install failed: {error}", file=sys.stderr, flush=True)
        print(f"engine | nothing was stamped: run it again once fixed (it resumes in {target.venv})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
