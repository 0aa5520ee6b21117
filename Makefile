# orchestra: two commands do all the set-up on a fresh machine.
#   make demo   venv + install, Docker (installed and started if absent), offline base
#               image, then the oracle over tasks/examples with a results table.
#   make test   the same set-up, then the whole test suite against the real engine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: setup docker base-image demo test test-unit test-integration lint bench cleanup

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

docker:
	./scripts/ensure-docker.sh

base-image: setup docker
	$(BIN)/orchestra images bootstrap

demo: base-image
	$(BIN)/orchestra run --path tasks/examples --manifest manifests/oracle.yaml --n-concurrent 3

test: base-image
	$(BIN)/pytest tests -q

test-unit: setup
	$(BIN)/pytest tests/unit -q

test-integration: base-image
	$(BIN)/pytest tests/integration -q

lint: setup
	$(BIN)/ruff check orchestrator tests bench

bench: base-image
	$(BIN)/python bench/trial_overhead.py

cleanup: setup
	$(BIN)/orchestra cleanup
