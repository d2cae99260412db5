"""`python -m thermostat.dev.simulators.runpod`: the simulator as a process (the dev stack starts it so)."""

import sys

from thermostat.dev.simulators.runpod.server import main

if __name__ == "__main__":
    sys.exit(main())
