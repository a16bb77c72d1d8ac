"""Named schema migrations and the one runner that applies them: the SQLite index, the
events sidecar beside a server index, and each PostgreSQL index.

A schema is an ordered tuple of ``Migration``s named ``mNNN_what`` (simonw/llm's
convention): NNN is its place in the tuple, the rest says what it does. A store records
how many it has applied (SQLite: ``PRAGMA user_version``; PostgreSQL: one row per
migration in ``<index>_schema_version``), so a released migration is never edited,
reordered or removed, only appended after. A store that records more than the code
knows is refused (a newer lore wrote it), never downgraded.

    migrate(schema, ledger)
      ledger.version() > len(schema) ──► ledger.too_new()        refused
      until ledger.version() == len(schema):
          with ledger.step():                                      one transaction each
              version = ledger.version()      re-read inside it: a concurrent opener
              if version < len(schema):       may have applied it meanwhile
                  ledger.apply(each step of schema[version])
                  ledger.record(version + 1, schema[version])

What differs per store is its ``Ledger``: how a step is run, how a migration is made
atomic and how the version is read and recorded. ``UserVersion`` is SQLite's; the
PostgreSQL one is in ``lore.backends.pgvector.schema``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

S = TypeVar("S")

_NAME = re.compile(r"m(\d{3})_[a-z0-9]+(?:_[a-z0-9]+)*")


@dataclass(frozen=True, slots=True)
class Migration(Generic[S]):
    """One named migration: its steps run in order, in one transaction."""

    name: str
    steps: tuple[S, ...]
    #: One line for people, where the store records it (PostgreSQL's version table).
    about: str = ""

    @property
    def number(self) -> int:
        return int(self.name[1:4])


def schema(*migrations: Migration[S]) -> tuple[Migration[S], ...]:
    """The migrations in order, checked: each named ``mNNN_what`` with NNN its place."""
    for place, migration in enumerate(migrations, start=1):
        if not _NAME.fullmatch(migration.name) or migration.number != place:
            raise ValueError(f"migration {place} is named {migration.name!r}, not m{place:03d}_<what>")
    return migrations


def number_of(migrations: Sequence[Migration[S]], name: str) -> int:
    """The version a store has once ``name`` is applied."""
    for migration in migrations:
        if migration.name == name:
            return migration.number
    raise KeyError(name)


class Ledger(Protocol[S]):
    """How one store applies and records migrations."""

    def version(self) -> int:
        """How many migrations the store has applied (0: none, a new store)."""
        ...

    def step(self) -> AbstractContextManager[object]:
        """One migration's transaction: committed when the block ends, rolled back when
        it raises."""
        ...

    def apply(self, step: S) -> None: ...

    def record(self, version: int, migration: Migration[S]) -> None:
        """Inside the step: the store now has ``version`` migrations applied."""
        ...

    def too_new(self, version: int, latest: int) -> Exception:
        """The error for a store a newer lore migrated further than this one knows."""
        ...


def migrate(migrations: Sequence[Migration[S]], ledger: Ledger[S]) -> int:
    """Apply what ``ledger``'s store lacks of ``migrations``, one transaction each;
    returns the version, ``len(migrations)``. Raises ``ledger.too_new(...)`` for a store
    newer than the code, before changing anything."""
    latest = len(migrations)
    version = ledger.version()
    if version > latest:
        raise ledger.too_new(version, latest)
    while version < latest:
        with ledger.step():
            version = ledger.version()
            if version < latest:
                migration = migrations[version]
                for step in migration.steps:
                    ledger.apply(step)
                version += 1
                ledger.record(version, migration)
    return latest


class UserVersion:
    """The ``Ledger`` of a SQLite database in autocommit mode: the version is ``PRAGMA
    user_version``, a migration runs under ``BEGIN IMMEDIATE`` (the write lock, taken
    before the version is re-read) and each step is one SQL statement."""

    def __init__(self, conn: sqlite3.Connection, too_new: Callable[[int, int], Exception]) -> None:
        self._conn = conn
        self._too_new = too_new

    def version(self) -> int:
        return user_version(self._conn)

    @contextmanager
    def step(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    def apply(self, step: str) -> None:
        self._conn.execute(step)

    def record(self, version: int, migration: Migration[str]) -> None:
        self._conn.execute(f"PRAGMA user_version = {int(version)}")

    def too_new(self, version: int, latest: int) -> Exception:
        return self._too_new(version, latest)


def user_version(conn: sqlite3.Connection) -> int:
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version
