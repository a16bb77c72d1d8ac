"""SQLite's errors become lore's in one place (``lore.sqlite_errors.translated``): each part
that keeps a SQLite file names its own class and what it was doing, and no other module
turns a ``sqlite3.Error`` into a ``LoreError`` its own way."""

from __future__ import annotations

import ast
import re
import sqlite3
from pathlib import Path

import pytest

from lore.backends.sqlite import read_stored_embedder
from lore.errors import ConfigError, IndexingError, LoreError, RetrievalError, VerdictStoreError
from lore.events.record import EventQuery
from lore.events.sqlite_store import SIDECAR_NAME, SqliteEventStore
from lore.sqlite_errors import translated
from translator_guard import translations

SRC = Path(__file__).resolve().parents[1] / "src"
#: The one module allowed to raise a ``LoreError`` for a ``sqlite3.Error`` it caught.
TRANSLATOR = SRC / "lore" / "sqlite_errors.py"


@pytest.mark.parametrize("error", [IndexingError, RetrievalError, VerdictStoreError, ConfigError])
def test_an_error_of_sqlite_becomes_the_callers_class_in_one_line(error: type[LoreError]) -> None:
    with pytest.raises(error) as raised, translated(error, "cannot read the index /data/lore.db"):
        sqlite3.connect(":memory:").execute("SELECT * FROM no_such_table")
    assert str(raised.value) == "cannot read the index /data/lore.db: no such table: no_such_table"
    assert isinstance(raised.value.__cause__, sqlite3.OperationalError)


def test_other_errors_pass_through_untouched() -> None:
    """A ``LoreError`` raised inside (a read-only index's refusal) keeps its class and
    message, and a bug stays a bug."""
    with pytest.raises(IndexingError, match=r"^read-only$"), translated(RetrievalError, "search"):
        raise IndexingError("read-only")
    with pytest.raises(KeyError), translated(RetrievalError, "search"):
        raise KeyError("a bug")


def _translations(tree: ast.AST) -> list[int]:
    """Lines where an ``except`` clause naming ``sqlite3`` raises a new error."""
    return translations(tree, lambda caught: "sqlite3" in ast.unparse(caught))


def test_a_second_translator_is_found_and_raising_on_is_not_one() -> None:
    second = (
        "try:\n    pass\nexcept (sqlite3.OperationalError, OSError) as err:\n"
        "    raise IndexingError(f'cannot: {err}') from err\n"
    )
    assert _translations(ast.parse(second)) == [4]
    raised_on = (
        "try:\n    pass\nexcept sqlite3.Error as err:\n    conn.close()\n"
        "    if not fallback:\n        raise\n    raise err\n"
        "except OSError as err:\n    raise IndexingError('not sqlite') from err\n"
    )
    assert _translations(ast.parse(raised_on)) == []


def test_only_the_translator_turns_a_sqlite_error_into_a_lore_error() -> None:
    found = [
        f"{path.relative_to(SRC)}:{line}"
        for path in sorted((SRC / "lore").rglob("*.py"))
        if path != TRANSLATOR
        for line in _translations(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []


# -- each part's own class and message ------------------------------------------------------


def test_a_corrupt_events_file_is_an_indexing_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / SIDECAR_NAME
    path.write_bytes(b"this is not a database" * 100)
    store = SqliteEventStore(path, sidecar=True)
    corrupt = f"^cannot read retrieval events in {re.escape(str(path))}: file is not a database$"
    with pytest.raises(IndexingError, match=corrupt):
        store.events(EventQuery())


def test_an_events_folder_that_cannot_be_made_is_an_indexing_error(tmp_path: Path) -> None:
    """Not SQLite's error but the file's all the same: the recorder counts it as a drop
    instead of losing its writer thread to an ``OSError``."""
    (tmp_path / "data").write_text("a file where the data folder should be", encoding="utf-8")
    store = SqliteEventStore(tmp_path / "data" / SIDECAR_NAME, sidecar=True)
    with pytest.raises(IndexingError, match="cannot make the folder of the events file"):
        store.events(EventQuery())


def test_a_corrupt_index_is_a_config_error_when_its_embedder_is_read(tmp_path: Path) -> None:
    path = tmp_path / "lore.db"
    path.write_bytes(b"this is not a database" * 100)
    corrupt = f"^cannot read the SQLite index {re.escape(str(path))}: .*file is not a database$"
    with pytest.raises(ConfigError, match=corrupt):
        read_stored_embedder(path)
