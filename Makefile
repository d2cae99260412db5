# Thermostat — `make run` starts the whole stack on embedded defaults, `make test` runs every test.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
GEN_STAMP := build/.proto
CLI := $(VENV)/bin/thermostat
PROTOS := tools/protogen.py $(shell find protos tests/protos -name '*.proto' 2>/dev/null)

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

venv: $(STAMP) $(CLI) ## create .venv, install pinned dependencies and the `thermostat` CLI (idempotent)
$(STAMP): requirements.txt requirements-tracing.txt requirements-dev.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing Python dependencies into $(VENV) ..."
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	@# this machine's pip config names local mirrors that may be absent; their warnings are noise
	@$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt 2>&1 | { grep -v '^WARNING: Location' || true; }
	@$(BIN)/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'thermostat.pth').write_text('$(CURDIR)/libs\n$(CURDIR)/services\n$(CURDIR)/dev\n')"
	@touch $@

# The operator CLI as a console script: the repository is not a distribution, so no entry point writes one.
$(CLI): $(STAMP)
	@printf '#!%s\nimport sys\n\nfrom thermostat.cli.main import main\n\nsys.exit(main())\n' "$(BIN)/python" > $@
	@chmod 755 $@

proto: $(GEN_STAMP) ## generate Python code, stubs and descriptor sets from protos/
$(GEN_STAMP): $(STAMP) $(CLI) $(PROTOS)
	@$(BIN)/python tools/protogen.py
	@touch $@

node_modules/.bin/buf: package.json
	@echo "installing buf (npm) ..."
	@npm install --silent --no-audit --no-fund
	@touch $@

k8s: proto ## write deploy/k8s/ (kustomize base), deploy/edge/envoy.yaml and deploy/compose.yaml from the registry
	@$(BIN)/python -m tools.k8s_manifests

images: venv ## build the services, edge and worker images from deploy/ (stand-ins where Docker Hub is out of reach: docs/containers.md)
	@$(BIN)/python -m thermostat.dev.images

# ENGINE=vllm: each simulated RunPod pod runs a real vLLM (the engine installs itself first, once)
run: proto $(if $(filter vllm,$(ENGINE)),engine) ## start embedded Postgres, the RunPod simulator, every service and the Envoy edge (PROMETHEUS=1: and Prometheus; ENGINE=vllm: a real vLLM per pod)
	@ENGINE=$(ENGINE) $(BIN)/python -m thermostat.dev.stack

engine: venv ## install the real vLLM the simulator runs with ENGINE=vllm and its tests need (.vllm; THERMOSTAT_VLLM_VENV: elsewhere; idempotent)
	@$(BIN)/python -m thermostat.dev.engine install

# Two test processes (pytest-xdist): the suite waits on processes it starts as much as it computes, so two keep a
# 2-core machine busy. TEST_WORKERS=0 runs it in this one process (pdb, -s); more cores can take more.
TEST_WORKERS ?= 2
test: proto ## run the whole test suite (TEST_WORKERS=2 processes; 0 for one)
	@$(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

# The tiers (unit, pg, e2e, chaos) are markers tests/fixtures/tiers.py gives each test from the fixtures it uses.
unit: proto ## run the unit tier (-m unit): no Postgres, stack or daemon needed; about a minute on two cores
	@THERMOSTAT_TEST_NO_POSTGRES=1 $(BIN)/python -m pytest -m unit $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

lint: proto node_modules/.bin/buf ## ruff, mypy, import contracts, buf lint and buf breaking
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .
	@$(BIN)/mypy
	@$(BIN)/lint-imports
	@$(BIN)/python -m tools.deploy_check
	@node_modules/.bin/buf lint
	@if git rev-parse -q --verify HEAD~1 >/dev/null && git ls-tree -r --name-only HEAD~1 -- protos | grep -q '\.proto$$'; then \
	  node_modules/.bin/buf breaking --against '.git#ref=HEAD~1' && echo "buf breaking: no breaking change against HEAD~1"; \
	else echo "buf breaking: the previous commit has no protos to compare with"; fi

chaos: proto ## run the chaos suite at full scale and print its figures (make test runs the short version)
	@$(BIN)/python -m pytest tests/chaos --chaos-scale=full $(PYTEST_ARGS)

# The queues bench/peers.py measures the pool against: into the venv for the benches only, never the image's.
PEERS_STAMP := $(VENV)/.peers-installed
$(PEERS_STAMP): $(STAMP) bench/requirements-peers.txt
	@echo "installing bench/requirements-peers.txt into $(VENV) (benches only) ..."
	@$(BIN)/python -m pip install -q --disable-pip-version-check -r bench/requirements-peers.txt 2>&1 | { grep -v '^WARNING: Location' || true; }
	@touch $@

bench: proto $(PEERS_STAMP) ## run the benchmarks under bench/ (prints ratios measured in one run; bench/_*.py are their helpers)
	@for b in bench/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b; done

clean: ## remove generated code, build outputs and local data
	rm -rf build tests/gen deploy/envoy/envoy.yaml .data
	find libs/thermostat -path '*/v1/*' -name '*_pb2*' -delete

.PHONY: help venv proto k8s images run engine test unit lint chaos bench clean
