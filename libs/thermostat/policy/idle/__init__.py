"""The idle monitor's decisions: a /metrics scrape read as activity, each pod's and the volume's signal, the
Down/Booting/Ready phase machine, the runtime cap, the monitor's options and memory, whether a pod is watched,
one tick, and when the monitor would stop a pod if nothing changed."""
