"""The pod controller: every RunPod call for model pods (wake, stop, observe), the billable-action audit
trail and the wake history. `python -m thermostat.pod_controller`."""
