# Two commands matter: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.lore-installed

.PHONY: install run test lint typecheck bench clean

# torch is pinned first so pip takes the CPU build that lies on this machine's disk
# instead of resolving a multi-GB CUDA build for sentence-transformers.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/lore --config examples/lore.toml sync
	$(BIN)/lore --config examples/lore.toml search "etcd cluster has no leader, what do I do?" --top-k 3
	$(BIN)/lore --config examples/lore.toml search "payments-consumer-group lag keeps growing" --top-k 3

lint: install
	$(BIN)/ruff check src tests bench

typecheck: install
	$(BIN)/mypy

# The retrieval-quality baseline CI defends: the examples golden set on the embedded default
# (local all-MiniLM-L6-v2, offline), indexed into build/ so the user's ./lore.db is untouched.
EVAL_ENV := LORE_DB_PATH=$(CURDIR)/build/ci/examples.db LORE_AUDIT_PATH=$(CURDIR)/build/ci/audit.jsonl

test: lint typecheck
	$(BIN)/pytest
	mkdir -p build/ci
	$(EVAL_ENV) $(BIN)/lore eval golden eval/golden/examples.yaml --config examples/lore.toml \
		--sync --check-baseline eval/baseline.json

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache lore.db lore.db.* lore.db-* lore-audit.jsonl
