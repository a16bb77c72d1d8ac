"""lore: the team's written knowledge (runbooks, postmortems, ADRs) as a search tool for
on-call agents and the humans beside them.

Start at ``lore.protocols`` for the seams and ``lore.models`` for the records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lore.errors import LoreError
    from lore.models import Chunk, Document, Passage, SearchMode, SyncReport, Visibility

__all__ = ["Chunk", "Document", "LoreError", "Passage", "SearchMode", "SyncReport", "Visibility"]
__version__ = "0.1.0"

#: Imported on first use (PEP 562): the ``lore`` command forks its query worker first
#: thing (``lore.cli``), and every module imported before that fork delays it; the
#: records' dataclasses are a twentieth of a cold search.
_LAZY = {name: "lore.errors" if name == "LoreError" else "lore.models" for name in __all__}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lore' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
