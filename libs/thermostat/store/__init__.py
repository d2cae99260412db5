"""The Postgres store: migrations, named SQL blocks, pools and leases (the embedded dev server is thermostat.dev)."""
