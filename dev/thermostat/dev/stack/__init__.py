"""The whole stack on one machine (`python -m thermostat.dev.stack`, `make run`); `supervisor` starts and stops it."""
