"""SQLite's errors as lore's: the one place where a ``sqlite3.Error`` becomes a ``LoreError``.

Three parts keep SQLite files, and each goes through ``translated`` with its own class:

- the index of the SQLite backend (``lore.backends.sqlite``): ``IndexingError`` on its
  write side and when it is opened, ``RetrievalError`` in a search;
- the event store (``lore.events.sqlite_store``): ``IndexingError``, which the recorder
  counts as a dropped event and ``lore events`` shows;
- the safety chain's kept verdicts (``lore.safety.verdicts``, ``chain.db``):
  ``VerdictStoreError``, on which the chain runs at query time; a missing, read-only,
  locked or corrupt ``chain.db`` never fails a search.

The message is one line, ``"<what the caller was doing>: <SQLite's reason>"``, and the
cause is chained (``raise ... from err``). A caller may still catch a raw ``sqlite3.Error``
to decide something before it is translated (the event store falls back to reading a
file it cannot open for writing; a read-only open tries ``immutable=1`` after
``mode=ro``; a connection half opened is closed), but raises it on unchanged:
``tests/test_sqlite_errors.py`` holds that no other module turns one into a ``LoreError``.

It sits with the foundation, below every part that keeps a SQLite file, so that a part
need not import another's package (nor a backend's) for it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from lore.errors import LoreError


@contextmanager
def translated(error: type[LoreError], what: str) -> Iterator[None]:
    """A ``sqlite3.Error`` raised in the block as ``error("<what>: <reason>")``."""
    try:
        yield
    except sqlite3.Error as err:
        raise error(f"{what}: {err}") from err
