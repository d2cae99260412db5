"""The idle monitor: ticks every configured pod, stops idle, never-ready and runaway pods through the pod
controller. `python -m thermostat.idle_monitor`."""
