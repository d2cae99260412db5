"""The pool dispatcher's engine: its parts, each a module, wired by the facade (pool_dispatcher/dispatcher.py, whose
docstring says where to look); local.py is what the process alone knows, machine_run.py one machine's run.
"""
