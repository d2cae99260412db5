"""A real vLLM for the dev stack and the tests: its own venv, a tiny random-weight model, one process per pod.

`recipe` says what is installed and how a process is started (notes: vllm-recipe.md), `install` builds the venv
once with progress output (`python -m thermostat.dev.engine install`, `make engine`), `process` runs and stops
one engine. The RunPod simulator's `--engine vllm` starts one per RUNNING pod (simulators/runpod/engine.py).
"""
