"""The pod controller's decisions: which GPUs may carry a pod, the wake round and the create walk, the wake's
result and last wake, which pod on the volume to report, the terminate guard and the wake ETA."""
