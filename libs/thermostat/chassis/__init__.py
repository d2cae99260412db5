"""Service chassis: what every Thermostat service process shares (server, health, reflection, auth,
settings, logging, request context)."""
