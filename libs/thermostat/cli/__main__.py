"""`python -m thermostat.cli …` (what `.venv/bin/thermostat` runs)."""

import sys

from thermostat.cli.main import main

sys.exit(main())
