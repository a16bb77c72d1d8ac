"""What lore writes is private to the user it runs as: the index (SQLite and its ``-wal``
and ``-shm``, the tantivy directories), notes, uploads, clones, events, the audit log and
the tokens hold the team's documents or what was asked of them.

Token files and the audit log were always written 0600; everything else followed the
process's umask (0644 for most), so any other account on the machine could read the
index. The commands that write data (``lore serve``, ``lore sync``, ``lore mcp``) run
under ``private_files``: a umask of 077 for every file and directory created meanwhile,
by lore, SQLite, tantivy, git or a sync's child process (a umask is inherited), and the
index and data folder made so at start when an older version left them readable.
A umask rather than a mode at each call site: the files SQLite, tantivy and git create
are not lore's calls to make. The paths come from the composition root
(``lore.resolve.private_files``), which reads them from the settings.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

PRIVATE_UMASK = 0o077


@contextlib.contextmanager
def private_files(data_dir: Path, index_file: Path) -> Iterator[None]:
    previous = os.umask(PRIVATE_UMASK)
    try:
        tighten(data_dir, index_file)
        yield
    finally:
        os.umask(previous)


def tighten(data_dir: Path, index_file: Path) -> None:
    """The data folder 0700 and the SQLite index's files 0600 (when this user owns them),
    and the tantivy folders beside it 0700: contents of a 0700 folder are out of others'
    reach whatever their own modes."""
    db_path = index_file
    for path in (data_dir, *db_path.parent.glob(db_path.name + ".tantivy*")):
        _chmod(path, 0o700)
    for suffix in ("", "-wal", "-shm", "-journal"):
        _chmod(db_path.with_name(db_path.name + suffix), 0o600)


def _chmod(path: Path, mode: int) -> None:
    try:
        status = path.lstat()
        if status.st_uid == os.getuid() and not stat.S_ISLNK(status.st_mode):
            path.chmod(mode)
    except OSError:
        pass  # absent, or not ours to change: nothing to tighten
