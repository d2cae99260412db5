"""The pool dispatcher: tenants' jobs on ephemeral machines of a catalogue's types, warm machines reused, several
processes over one Postgres store. `python -m thermostat.pool_dispatcher`."""
