"""Examples of Thermostat's Python client (thermostat.client), each runnable against `make run`."""
