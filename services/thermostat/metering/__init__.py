"""Metering: the spend ledger, pod spend and pod budgets (issue 12).

The service shares its name with its contract's generated package (`thermostat.metering.v1`, under libs/):
extend_path joins libs/thermostat/metering to this package, so both import under one name.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
