"""The pool dispatcher's decisions (worker-pool seed: worker-pool.md), pure like the rest of the policy library.

One module per decision: the catalogue (`machine_type`), submit options, queue order, placement, warm-machine
choice, unbooted machines (a placement whose answer was lost), cool-down reaping, health retirement,
job-outcome mapping, cancel and hints. Observations come in as frozen values (`machines.Machine`, the
catalogue, probe results, a worker reply) with `now` as an argument; the dispatcher service carries
the decisions out against the store and the backends.
"""
