"""The pool dispatcher's decisions (worker-pool seed: worker-pool.md), pure like the rest of the policy library.

One module per decision: the job and machine state machines (`jobs`, `machines`: transition tables), the
catalogue (`machine_type`), submit options, queue order, placement, unbooted machines (a placement whose answer
was lost), cool-down reaping, health retirement, job-outcome mapping, cancel and hints. Which warm machine takes
a submitted job is decided inside the statement that claims it (pool_dispatcher/repository/jobs.sql `submit`),
so that rule is written there alone (tests/integration/pool_dispatcher/test_warm_choice.py). Observations come in
as frozen values (`machines.Machine`, the catalogue, probe results, a worker reply) with `now` as an argument;
the dispatcher service carries the decisions out against the store and the backends.
"""
