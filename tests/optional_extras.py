"""Tests of an optional extra skip where it is not installed, except in CI.

``make install`` installs every extra (``.[all,dev]``), so in CI a missing one is a broken
install, and a skip would hide it: under ``CI=true`` (any of 1/true/yes) the test fails with
what is missing instead. Use these instead of ``pytest.importorskip``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _missing(module: str, extra: str) -> str:
    return f"{module!r} is not installed (pip install 'lore-sre[{extra}]')"


def _fail_in_ci(module: str, extra: str) -> None:
    pytest.fail(
        f"CI=true and {_missing(module, extra)}: `make install` installs every extra, so the "
        "install is broken; a skip would hide it",
        pytrace=False,
    )


def require_extra(module: str, extra: str) -> ModuleType:
    """``pytest.importorskip`` that fails under CI. Works at module level and inside tests.
    ``extra`` names what installs it (a lore extra such as ``qdrant``, or ``dev``)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        pass  # outside the handler, so the report is our one line, not a chained traceback
    if in_ci():
        _fail_in_ci(module, extra)
    pytest.skip(_missing(module, extra), allow_module_level=True)


def needs_extra(module: str, extra: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark that looks the module up without importing it (for code whose own
    import must come first); under CI a missing module fails at collection instead."""
    try:
        missing = importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a parent package of a dotted name is missing
        missing = True
    if missing and in_ci():
        _fail_in_ci(module, extra)
    return pytest.mark.skipif(missing, reason=_missing(module, extra))
