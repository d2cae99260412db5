"""`python -m thermostat.store.migrate`: apply the pending migrations to DATABASE_URL, then exit.

The deployment's migration step (the Kubernetes Job, compose's `migrate` service) runs this before the services
roll, so a migration runs once, visibly, and a failing one fails the step instead of every replica's start. Each
service still applies what is pending when it opens its store (`Store.open`), serialized on the same advisory
lock, so starting without the step is safe: the first replica applies, the others find nothing to do.

Exit status: 0 once the database is current (whether or not this run applied anything), 1 when a migration or the
connection failed (the error is logged), 2 when DATABASE_URL is missing or invalid.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from thermostat.chassis.logs import configure_logging
from thermostat.chassis.settings import ServiceSettings, load_settings
from thermostat.store.db import apply_migrations

NAME = "migrate"

_log = logging.getLogger(__name__)


async def run(dsn: str) -> int:
    try:
        applied = await apply_migrations(dsn)
    except Exception:
        _log.exception("migrations failed")
        return 1
    if applied:
        _log.info("applied %d migration(s), now at %s", len(applied), applied[-1].file_name)
    else:
        _log.info("database already current; nothing to apply")
    return 0


def main() -> int:
    settings = load_settings(ServiceSettings)
    configure_logging(NAME, settings.log_level)
    if settings.database_url is None:
        print("DATABASE_URL is required: the database to migrate", file=sys.stderr)
        return 2
    return asyncio.run(run(settings.database_url.get_secret_value()))


if __name__ == "__main__":
    sys.exit(main())
