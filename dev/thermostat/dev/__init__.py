"""Development tooling: the RunPod simulator, the dev stack (`make run`), the embedded Postgres and Envoy
launchers. Tests and bench/ use it; runtime code (libs/, services/) never imports it (an import-linter
contract), and the production image does not contain it (deploy/container/Dockerfile copies libs/ and
services/ only; its wheels are in requirements-dev.txt)."""
