"""The pool dispatcher's engine: its parts, each a module, wired by the facade (pool_dispatcher/dispatcher.py).

Which warm machine gets a job: placement.py. What happens when a machine dies mid-job: runner.py and
machine_run.py (and hand_back.py for one that could not be reached before the job went out). The rest: intake.py
(submit, group commit), waits.py, fleet.py (boot and stop), scaler.py (the periodic pass), catalogue.py,
ownership.py (the instance lease's fence), writes.py (store writes that must land), drivers.py (which task drives a
machine), local.py (what the process alone knows), tasks.py.
"""
