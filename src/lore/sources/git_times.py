"""When each file of a folder inside a git work tree was last committed.

A fresh checkout sets every file's mtime to the moment of the clone, so mtime says every
runbook was "updated today" and the ``stale`` flag never fires. The last commit that
touched a file is what "updated" means to its readers.

One ``git log`` pass covers the whole folder (plus one ``rev-parse`` and one ``diff``),
whatever the number of files. This is subprocess git, not a library: GitPython shells
out to the same binary one process per query, and pygit2 or dulwich would have to diff
every commit's tree in Python to answer "last commit per path", which ``git log
--name-only`` does in C in one pass.

Anything that prevents an answer (no git binary, not a work tree, a repository without
commits, a repository git refuses as not owned by this user) gives an empty mapping, so
the caller keeps mtime, silently: a folder of runbooks need not be a repository.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

logger = logging.getLogger(__name__)

#: A history walk over a large monorepo takes seconds; far longer means something is wrong
#: (a network filesystem, a lock), and mtime is a better answer than a hung sync.
_TIMEOUT_SECONDS = 120.0


def _git(root: Path, *args: str) -> bytes | None:
    """stdout of ``git args`` run in ``root``, or None when git cannot answer."""
    # No optional index writes (``git diff`` refreshes the index otherwise): a sync reads.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, env=env, capture_output=True, timeout=_TIMEOUT_SECONDS, check=False
        )
    except FileNotFoundError:  # no git binary
        return None
    except (OSError, subprocess.TimeoutExpired) as err:
        logger.warning("git %s in %s failed (%s); using file modification times", args[0], root, err)
        return None
    return done.stdout if done.returncode == 0 else None


def last_commit_times(root: Path) -> Mapping[str, datetime]:
    """Relative POSIX path (relative to ``root``) -> committer time of the last commit
    that touched it, for files whose working copy matches HEAD. Files modified since
    (staged or not), untracked files and folders outside a work tree are absent."""
    prefix_out = _git(root, "rev-parse", "--show-prefix")
    if prefix_out is None:
        return {}
    prefix = os.fsdecode(prefix_out.strip())
    log = _git(root, "log", "--format=%x00%ct", "--name-only", "-z", "--no-renames", "--", ".")
    if log is None:
        return {}
    changed = _git(root, "diff", "--name-only", "-z", "--no-renames", "HEAD", "--", ".")
    if changed is None:
        return {}
    modified = {os.fsdecode(name) for name in changed.split(b"\0") if name}
    times: dict[str, datetime] = {}
    for path, when in _parse_log(log):
        if path in times or path in modified or not path.startswith(prefix):
            continue
        times[path] = when
    return {path[len(prefix):]: when for path, when in times.items()}


def _parse_log(output: bytes) -> list[tuple[str, datetime]]:
    """``--format=%x00%ct --name-only -z`` output, newest commit first: each commit is an
    empty field (the ``%x00``), its timestamp, then its paths (the first after a newline);
    a merge lists no paths. Paths are relative to the top of the work tree."""
    pairs: list[tuple[str, datetime]] = []
    fields = output.split(b"\0")
    when: datetime | None = None
    position = 0
    while position < len(fields):
        field = fields[position]
        position += 1
        if not field:
            if position < len(fields) and fields[position].strip().isdigit():
                when = datetime.fromtimestamp(int(fields[position].strip()), UTC)
                position += 1
            continue
        if when is not None:
            name = field[1:] if field.startswith(b"\n") else field
            pairs.append((os.fsdecode(name), when))
    return pairs
