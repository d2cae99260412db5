"""What the pod controller and the idle monitor both decide over: the pod model in RunPod REST v2 terms and
each pod's options read from the environment."""
