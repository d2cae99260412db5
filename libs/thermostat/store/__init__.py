"""The Postgres store: embedded server, migrations, named SQL blocks, pools and leases."""
