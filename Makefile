# orchestra: two commands do all the set-up on a fresh machine.
#   make demo   venv + install, Docker (installed and started if absent), offline base
#               image, then the oracle over tasks/examples with a results table.
#   make test   the same set-up, then the whole test suite against the real engine.
#   make local-model / make eval-local   a real model server on this machine (not in tests).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEMO    := $(shell date +%Y%m%d-%H%M%S)

.PHONY: setup docker test-tools base-image demo local-model eval-local test-models test test-hostile test-gvisor test-ray test-unit test-integration lint bench cleanup

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
	$(BIN)/orchestra run --path tasks --manifest manifests/oracle.yaml --n-concurrent 4 --job-name demo-oracle-$(DEMO)
	$(BIN)/orchestra run --path tasks/memorybench --manifest manifests/solo-replay.yaml --n-concurrent 4 --job-name demo-on-$(DEMO) --json jobs/demo-on-$(DEMO).json
	$(BIN)/orchestra run --path tasks/memorybench --manifest manifests/solo-replay.yaml --policy memory-off --n-concurrent 4 --job-name demo-off-$(DEMO) --json jobs/demo-off-$(DEMO).json
	$(BIN)/orchestra compare jobs/demo-on-$(DEMO).json jobs/demo-off-$(DEMO).json --markdown jobs/demo-compare-$(DEMO).md

local-model:
	./scripts/local-model.sh

LOCAL := --endpoint-config endpoints/local.json --manifest manifests/solo-local.yaml --n-concurrent 2
eval-local: base-image local-model
	$(BIN)/orchestra run --path tasks/examples $(LOCAL) --job-name local-reference-$(DEMO)
	$(BIN)/orchestra run --path tasks/examples $(LOCAL) --agent mini-swe-agent --job-name local-mini-$(DEMO)
	$(BIN)/orchestra run --path tasks/memorybench $(LOCAL) --job-name local-on-$(DEMO) --json jobs/local-on-$(DEMO).json
	$(BIN)/orchestra run --path tasks/memorybench $(LOCAL) --policy memory-off --job-name local-off-$(DEMO) --json jobs/local-off-$(DEMO).json
	$(BIN)/orchestra compare jobs/local-on-$(DEMO).json jobs/local-off-$(DEMO).json --markdown jobs/local-compare-$(DEMO).md

# make test-models: every installed agent CLI (and the reference agent) on the local model
# server, through `orchestra run`, on hello-file and memorybench's mb-exact, one trial at a
# time; prints per agent its reward, calls, the tokens the server reported beside those
# orchestra recorded, and how each trial ended (scripts/test-models.py; README "Agents and
# real models"). The server gets a 32768-token context (Claude Code's first prompt is ~12k
# tokens; a server already running keeps its own). MODELS_RECORD=tests/fixtures/llamacpp-agents
# also writes the recordings `make test` replays (tests/integration/test_recorded_agents.py).
test-models: base-image
	ORCHESTRA_LOCAL_MODEL_CTX=$${ORCHESTRA_LOCAL_MODEL_CTX:-32768} ./scripts/local-model.sh
	$(BIN)/orchestra agents --install all || echo "orchestra: not every agent CLI could be fetched now: those are left out" >&2
	$(BIN)/python scripts/test-models.py $(if $(MODELS_RECORD),--record $(MODELS_RECORD)) $(MODELS_ARGS)

test-tools:
	./scripts/ensure-test-tools.sh

# make test: lint first (ruff, mypy), then every stand-in base (bullseye too: its conformance
# probe runs), then the whole suite, which ends with the parts line and fails when a promised
# real part did not run (tests/partsline.py; README "Test parts"). The suite waits on the
# engine far more than it computes, so it runs in TEST_WORKERS processes (pytest-xdist, each
# file whole on one worker); files that change the whole engine run alone
# (tests/engineshare.py). TEST_WORKERS=0 runs it in one process.
# The three bases (debootstrap: waits on Debian's mirror, touches no host package state) are
# built while apt installs the test tools and pip/npm fetch the agent CLIs the tests run: on
# a fresh machine these are most of the set-up. An agent that cannot be fetched now (no
# network) is not an error here: its tests fetch it or say why they could not.
TEST_WORKERS ?= 2
AGENTS_LOG := /tmp/orchestra-agents-install.log
test: lint docker
	$(BIN)/orchestra images bootstrap --release bookworm --release trixie --release bullseye & bases=$$!; \
	  $(BIN)/orchestra agents --install all >$(AGENTS_LOG) 2>&1 & agents=$$!; \
	  ./scripts/ensure-test-tools.sh; tools=$$?; \
	  wait $$agents || echo "orchestra: not every agent CLI could be fetched now (log: $(AGENTS_LOG))" >&2; \
	  wait $$bases && exit $$tools
	$(BIN)/pytest tests -q --durations=40 --require-parts -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-hostile: base-image
	$(BIN)/pytest tests/hostile -q

# The hostile, integrity and round-2 matrices with every trial under gVisor (runsc must be
# registered: make docker does it where it starts the engine); tests/hostile/README.md has
# the outcomes that differ and why.
test-gvisor: base-image
	ORCHESTRA_TEST_RUNTIME=runsc $(BIN)/pytest tests/hostile -q

test-ray: base-image
	$(BIN)/pytest tests/ray -q

test-unit: setup
	$(BIN)/pytest tests/unit -q

test-integration: base-image
	$(BIN)/pytest tests/integration -q

lint: setup
	$(BIN)/ruff check orchestrator tests bench
	$(BIN)/mypy orchestrator

bench: base-image
	$(BIN)/python bench/run.py
	$(BIN)/python bench/ray_throughput.py

cleanup: setup
	$(BIN)/orchestra cleanup
