"""Fixtures every test module may use."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Real corpora and benchmarks live beside the checkout, never inside it.
SHARED_ROOT = REPO_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared_root() -> Path:
    """``../shared``; tests that need it skip with a reason on a clone without it."""
    if not (SHARED_ROOT / "corpora").is_dir():
        pytest.skip(f"../shared is absent ({SHARED_ROOT}): real corpora and benchmarks not available")
    return SHARED_ROOT


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT
