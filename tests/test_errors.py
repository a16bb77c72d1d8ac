"""Every error lore raises on purpose is a ``LoreError`` defined in ``lore/errors.py`` and
drawn in the tree of its docstring, so a caller finds them all in one place."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import lore
import lore.errors
from lore.errors import LoreError

SRC = Path(lore.__file__).parent
ERRORS = {
    name
    for name, value in vars(lore.errors).items()
    if isinstance(value, type) and issubclass(value, LoreError)
}


def _base_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


def test_no_lore_error_is_defined_outside_errors_py() -> None:
    elsewhere = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and _base_names(node) & ERRORS:
                elsewhere.append(f"{path.relative_to(SRC)}: {node.name}")
    assert not elsewhere, elsewhere


def test_the_docstring_draws_the_whole_tree() -> None:
    doc = lore.errors.__doc__ or ""
    drawn: dict[str, int] = {}
    for line in doc.splitlines():
        found = re.match(r"^ {4}((?:[│ ] {3})*)(?:[├└]── )?([A-Z]\w+)", line)
        if found:
            drawn[found.group(2)] = len(found.group(1)) // 4 + (1 if "──" in line else 0)
    assert set(drawn) == ERRORS
    for name in ERRORS:
        cls = getattr(lore.errors, name)
        depth = inspect.getmro(cls).index(LoreError)
        assert drawn[name] == depth, f"{name} is drawn at depth {drawn[name]}, is at {depth}"


def test_the_lookalike_a_plain_exception_is_not_counted() -> None:
    """A class that merely ends in Error (the MCP stdio loop's JSON-RPC error) is not a
    LoreError and may live beside its use."""
    tree = ast.parse("class _RpcError(Exception):\n    pass\n")
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    assert not _base_names(node) & ERRORS
