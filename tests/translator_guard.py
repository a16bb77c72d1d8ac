"""The AST check behind each driver's "one translator" test (``test_sqlite_errors``,
``backends/test_pgvector_errors``): the lines where an ``except`` clause catching the
driver's errors raises something other than the error it caught. A bare ``raise`` or the
``raise`` of a name (deciding, cleaning up and raising it on) is allowed."""

from __future__ import annotations

import ast
from collections.abc import Callable


def translations(tree: ast.AST, catches_driver: Callable[[ast.expr], bool]) -> list[int]:
    """Lines of ``tree`` where a handler whose type ``catches_driver`` raises a new error."""
    found = []
    for handler in ast.walk(tree):
        if not isinstance(handler, ast.ExceptHandler) or handler.type is None:
            continue
        if not catches_driver(handler.type):
            continue
        for node in (inner for statement in handler.body for inner in ast.walk(statement)):
            if isinstance(node, ast.Raise) and node.exc is not None and not isinstance(node.exc, ast.Name):
                found.append(node.lineno)
    return found
