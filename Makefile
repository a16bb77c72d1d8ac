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

test: lint typecheck
	$(BIN)/pytest

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache lore.db lore.db-* lore.tantivy
