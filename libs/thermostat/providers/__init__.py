"""Outbound adapters: HTTP clients that shape provider answers into the policy package's value types."""
