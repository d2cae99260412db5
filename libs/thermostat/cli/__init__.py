"""`thermostat …`: the operator CLI over the typed client (`thermostat.client`), never a second gRPC client.

Tables for people, `--json` for scripts, a live display while a wake boots or a job waits, and exit codes
(`exit_codes.py`) a script can branch on. `make venv` installs it as `.venv/bin/thermostat`; anywhere the
runtime is installed (the image included) `python -m thermostat.cli` is the same program.
"""
