"""Metering's decisions: billed intervals and spend from billable actions, budget verdicts, projected spend."""
