"""Simulators of the providers Thermostat drives, served over real sockets for the tests and `make run`.

Nothing here is imported by a service: a simulator stands in for RunPod at the network boundary only.
"""
