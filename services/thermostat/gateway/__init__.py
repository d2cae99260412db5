"""The inference gateway: the OpenAI HTTP API at the edge's /openai/v1, waking the model pod on request (issue 34).

The service shares its name with its contract's generated package (`thermostat.gateway.v1`, under libs/):
extend_path joins libs/thermostat/gateway to this package, so both import under one name.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
