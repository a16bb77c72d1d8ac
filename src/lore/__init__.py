"""lore: the team's written knowledge (runbooks, postmortems, ADRs) as a search tool for
on-call agents and the humans beside them.

Start at ``lore.protocols`` for the seams and ``lore.models`` for the records.
"""

from lore.errors import LoreError
from lore.models import Chunk, Document, Passage, SearchMode, SyncReport, Visibility

__all__ = ["Chunk", "Document", "LoreError", "Passage", "SearchMode", "SyncReport", "Visibility"]
__version__ = "0.1.0"
