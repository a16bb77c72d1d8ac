"""Fixtures every test module may use."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from mounts import mount_root, read_only_view, small_disk  # noqa: F401 (fixtures: a tmpfs, a read-only bind)

# A suite started with SIGINT ignored (a background job of a shell without job control)
# passes that on to every process it starts, and the Ctrl-C tests would send a Ctrl-C that
# nothing receives: this process and its children take SIGINT and SIGQUIT as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)

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


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """lore's default cache (``platformdirs``: $XDG_CACHE_HOME/lore) points into the test
    session, for this process and every ``lore`` it starts: tests never read or write the
    user's cache. Set in the environment because several tests strip LORE_* from children."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    yield cache
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture(autouse=True)
def _query_model_defaults() -> Iterator[None]:
    """A test that opens a server's service sets the process's query-model choices
    (``lore.serving.configure_server_process``: int8 weights, one thread): the next test
    starts from a plain process's."""
    from lore.embedders import openvino_runtime

    yield
    openvino_runtime.set_query_weights("float32")
