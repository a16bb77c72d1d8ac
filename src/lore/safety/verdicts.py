"""The chain's verdicts, kept: each text's screened and redacted form, computed once.

Screening and redaction are pure functions of a text, the chain's code and a few settings
(PII redaction, the link allow-list). The same chunks, titles and uris come back search
after search and process after process, and the chain costs a few milliseconds per
passage (``bench/safety_chain_cost.py``), so a one-shot ``lore search`` or a server's first
sight of a chunk would pay it on the request's path. Sync therefore runs the chain over
every chunk it writes (text, title, section, uri, revision, id, source type) and keeps the
result here; a search reads it back.

What is kept IS the chain's output for that text, under that chain:

- the key is ``sha256(fingerprint, text)``: a row answers only for the exact text and
  the exact chain that produced it, never for a look-alike;
- the fingerprint (``chain_fingerprint``) hashes the chain's source files (every module
  of ``lore.safety`` and the cleaning stage), the versions of the libraries whose rules
  or parsing it runs (betterleaks, detect-secrets, markdown-it-py, regex), Python's
  Unicode version and the settings that change its output. Any change to a rule, even a
  comment, is a new fingerprint: every text is screened again (at the next sync, or at
  query time on a miss), with no version number anyone must remember to bump;
- a miss, an unreadable file, a corrupt row, a read-only data directory: the chain runs
  at query time, as it always did, and writes its result back when it can. The store
  only ever saves work; it never decides what is shown.

Someone who can write this file can also write the index and the server's secret beside
it, so the file is trusted like them (``private_files`` permissions); a row is still
checked for shape before it is used.

The file is ``chain.db`` in the data directory (``lore.db.data/`` by default), one per
host whatever the backend: SQLite, pgvector, Qdrant and the others read the same way.
Rows of other fingerprints are dropped at each sync; the file is capped at
``MAX_ROWS`` rows, the oldest written dropped first.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import sqlite3
import sys
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from lore.errors import VerdictStoreError
from lore.sqlite_errors import translated

logger = logging.getLogger(__name__)

#: The file's name in the data directory.
SIDECAR_NAME = "chain.db"
#: Rows kept at most (about 2 KB each): the oldest written are dropped beyond it.
MAX_ROWS = 400_000

#: A cleaned text and its findings per kind, as ``PassageCleaner.clean_uncached`` returns.
Verdict = tuple[str, tuple[tuple[str, int], ...]]

#: The libraries whose rules or parsing change what the chain returns, each by the file
#: that states its version (read, not imported: importing detect-secrets costs 0.4 s, and
#: ``importlib.metadata`` scans every installed distribution on its first call).
_LIBRARIES = (
    ("betterleaks", "__init__.py"),
    ("detect_secrets", "__version__.py"),
    ("markdown_it", "__init__.py"),
    ("regex", "_main.py"),
)

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS verdicts (
        key BLOB PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        cleaned TEXT NOT NULL,
        findings TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS verdicts_by_fingerprint ON verdicts (fingerprint)",
    # "complete": the fingerprint under which every chunk of the index was kept once.
    "CREATE TABLE IF NOT EXISTS verdict_state (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


def chain_fingerprint(code_files: Iterable[Path], settings: Mapping[str, object]) -> str:
    """A digest of everything that changes the chain's output for a given text:
    ``code_files`` (its source), the libraries' versions, Python's Unicode tables and
    ``settings`` (JSON-serialisable values). ``VerdictStoreError`` when a source file
    cannot be read (an install without sources): then nothing is kept."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in code_files):
        try:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        except OSError as err:
            raise VerdictStoreError(f"cannot read the chain's source {path}: {err}") from err
    for name, version_file in _LIBRARIES:
        digest.update(name.encode() + b"=" + _library_version(name, version_file) + b"\0")
    digest.update(f"python={sys.version_info[:2]} unicode={unicodedata.unidata_version}\0".encode())
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _library_version(name: str, version_file: str) -> bytes:
    """The digest of the file of package ``name`` that states its version; ``absent``."""
    spec = importlib.util.find_spec(name)
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        return b"absent"
    try:
        return hashlib.sha256((Path(next(iter(locations))) / version_file).read_bytes()).hexdigest().encode()
    except OSError:
        return b"absent"


def verdict_key(fingerprint: str, text: str) -> bytes:
    """The row of ``text`` under the chain ``fingerprint``."""
    return hashlib.sha256(fingerprint.encode() + b"\0" + text.encode("utf-8", "surrogatepass")).digest()


class VerdictStore:
    """The chain's results in one SQLite file, opened on first use, shared by threads."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        """``create``: make the file when it is absent (sync does); a search's store
        (False) reads and writes back only a file sync made, so ``lore search`` leaves
        nothing new in the data directory and a read-only one stays quiet."""
        self._path = Path(path)
        self._create = create
        self._conn: sqlite3.Connection | None = None
        self._guard = threading.Lock()

    def _absent(self) -> bool:
        return not self._create and self._conn is None and not self._path.exists()

    @property
    def path(self) -> Path:
        return self._path

    @contextmanager
    def _connection(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._guard, translated(VerdictStoreError, f"{what} in {self._path}"):
            if self._conn is None:
                self._conn = self._open()
            yield self._conn

    def _open(self) -> sqlite3.Connection:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # not SQLite's: a folder that cannot be made (a read-only mount)
            raise VerdictStoreError(f"cannot make the folder of {self._path}: {err}") from err
        # A search waits at most a moment for another writer (its write-back is optional);
        # a sync waits as the index does.
        timeout = 5.0 if self._create else 0.2
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=timeout)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            for statement in _SCHEMA:
                conn.execute(statement)
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    def get_many(self, fingerprint: str, texts: Sequence[str]) -> dict[str, Verdict]:
        """The kept verdicts of those of ``texts`` that have one under ``fingerprint``."""
        keys = {verdict_key(fingerprint, text): text for text in texts}
        found: dict[str, Verdict] = {}
        if not keys or self._absent():
            return found
        listed = list(keys)
        with self._connection("cannot read the chain's verdicts") as conn:
            for start in range(0, len(listed), 500):
                batch = listed[start : start + 500]
                marks = ",".join("?" * len(batch))
                rows = conn.execute(
                    f"SELECT key, fingerprint, cleaned, findings FROM verdicts WHERE key IN ({marks})", batch
                ).fetchall()
                for key, kept_fingerprint, cleaned, findings in rows:
                    verdict = _verdict(cleaned, findings)
                    # The key holds the fingerprint already; the column is checked too, so
                    # a row written under another chain is never read as this one's.
                    if verdict is not None and kept_fingerprint == fingerprint and key in keys:
                        found[keys[key]] = verdict
        return found

    def put_many(self, fingerprint: str, verdicts: Mapping[str, Verdict]) -> None:
        """Keep ``verdicts`` (text -> the chain's result under ``fingerprint``)."""
        if not verdicts or self._absent():
            return
        rows = [
            (verdict_key(fingerprint, text), fingerprint, cleaned, json.dumps(list(findings)))
            for text, (cleaned, findings) in verdicts.items()
        ]
        with self._connection("cannot keep the chain's verdicts") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO verdicts (key, fingerprint, cleaned, findings) "
                    "VALUES (?, ?, ?, ?)",
                    rows,
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def missing(self, fingerprint: str, texts: Iterable[str]) -> list[str]:
        """Those of ``texts`` (once each) without a verdict under ``fingerprint``."""
        unique = list(dict.fromkeys(texts))
        kept = self.get_many(fingerprint, unique)
        return [text for text in unique if text not in kept]

    def prune(self, fingerprint: str, max_rows: int = MAX_ROWS) -> int:
        """Drop every row of another fingerprint, and the oldest beyond ``max_rows``."""
        with self._connection("cannot prune the chain's verdicts") as conn:
            dropped = conn.execute("DELETE FROM verdicts WHERE fingerprint != ?", (fingerprint,)).rowcount
            (count,) = conn.execute("SELECT count(*) FROM verdicts").fetchone()
            if count > max_rows:
                dropped += conn.execute(
                    "DELETE FROM verdicts WHERE rowid IN (SELECT rowid FROM verdicts ORDER BY rowid LIMIT ?)",
                    (count - max_rows,),
                ).rowcount
        return int(dropped)

    def complete_for(self) -> str | None:
        """The fingerprint under which the whole index was kept (``mark_complete``)."""
        with self._connection("cannot read the chain's verdicts") as conn:
            row = conn.execute("SELECT value FROM verdict_state WHERE name = 'complete'").fetchone()
        return None if row is None else str(row[0])

    def mark_complete(self, fingerprint: str) -> None:
        with self._connection("cannot keep the chain's verdicts") as conn:
            conn.execute(
                "INSERT OR REPLACE INTO verdict_state (name, value) VALUES ('complete', ?)", (fingerprint,)
            )

    def close(self) -> None:
        with self._guard:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _verdict(cleaned: object, findings: object) -> Verdict | None:
    """A row's verdict, or None for a row of the wrong shape (then the chain runs)."""
    if not isinstance(cleaned, str) or not isinstance(findings, str):
        return None
    try:
        parsed = json.loads(findings)
    except ValueError:
        return None
    if not isinstance(parsed, list):
        return None
    pairs: list[tuple[str, int]] = []
    for item in parsed:
        if not (isinstance(item, list) and len(item) == 2):
            return None
        kind, count = item
        if not isinstance(kind, str) or not isinstance(count, int) or isinstance(count, bool):
            return None
        pairs.append((kind, count))
    return cleaned, tuple(pairs)
