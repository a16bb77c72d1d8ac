"""A folder of runbooks, postmortems and ADRs as a knowledge source.

Every listing is complete (``incremental = False``): sync compares revisions, which are
sha256 hashes of the file bytes, so only changed files are re-chunked and re-embedded.
A document's ``updated_at`` is its front matter's date, else (inside a git work tree) the
last commit that touched the file, else the file's mtime (``git_times.py``). Only regular
files are read: a FIFO or device matching a glob is reported and skipped, never opened in
a way that could block.

Globs use pathspec's gitignore semantics rather than fnmatch, because that is what
people already write in ``.gitignore``: ``**/*.md`` also matches ``a.md`` at the root,
``drafts/`` excludes a whole directory wherever it is, and excluded directories are
pruned instead of walked.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import re
import stat
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from lore.config import LoreSettings
from lore.errors import ConfigError, ExtractionError, SourceError
from lore.extract import CONVERTED_SUFFIXES, EXTRACTION_VERSION, extract
from lore.models import LABEL_VALUE_SEPARATOR, Document, SourceFailure, SourceItem, Visibility, utc
from lore.source_tables.filesystem import FilesystemSourceConfig as FilesystemSourceConfig
from lore.source_tables.media import DEFAULT_EXCLUDE as DEFAULT_EXCLUDE
from lore.source_tables.media import DEFAULT_INCLUDE as DEFAULT_INCLUDE
from lore.source_tables.media import MEDIA_TYPES as MEDIA_TYPES
from lore.sources.git_times import last_commit_times
from lore.sources.names import escape_name, not_text_reason

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

#: Front-matter keys read as the document's last change, most specific first.
UPDATED_KEYS = ("updated", "last_updated", "date", "last_reviewed")
#: Path label: the file's directory relative to the root (absent for top-level files).
FOLDER_LABEL = "folder"
#: Labels are filter terms, not prose: longer front-matter values are left out.
MAX_LABEL_VALUE_CHARS = 200
#: Enough to tell text from binary; a NUL byte never occurs in UTF-8 text.
_SNIFF_BYTES = 8192
#: Files read per trip to a worker thread: one trip per file costs more in thread
#: hand-offs than reading a typical runbook does.
_READ_BATCH = 32



def decode_text(uri: str, data: bytes) -> str | SourceFailure:
    """A file's bytes as text, or why they are not indexed: the one text check of every
    source that reads files (filesystem, git, the playbook pack)."""
    if b"\x00" in data[:_SNIFF_BYTES]:
        return SourceFailure(uri, "binary file (contains NUL bytes); only UTF-8 text is indexed")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        return SourceFailure(uri, f"not valid UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start})")


def too_large(size: int, limit: int) -> str:
    return f"file is {size:,} bytes, over this source's max_file_bytes ({limit:,})"


#: The model of its tables (``lore.source_tables``), where callers have always found it.
CONFIG_MODEL = FilesystemSourceConfig


@functools.lru_cache(maxsize=64)
def compiled_spec(lines: tuple[str, ...]) -> GitIgnoreSpec:
    """The patterns compiled once per process: ``lore serve`` builds its sources again
    for every sync and every ``GET /v1/sync``, and compiling the patterns to regular
    expressions was most of that (about 1 ms a source). A spec is only read once built."""
    # Imported here, not at the top: loading settings imports this module for its config
    # model (every command, a cold search included), and only a sync matches files.
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec.from_lines(lines)


class FilesystemSource:
    """Files under ``root`` matching ``include`` and not ``exclude``, in sorted order."""

    source_type = "filesystem"
    incremental = False

    def __init__(
        self,
        name: str,
        root: Path,
        *,
        visibility: Visibility | None,
        include: Sequence[str] = DEFAULT_INCLUDE,
        exclude: Sequence[str] = DEFAULT_EXCLUDE,
        labels: Mapping[str, str] | None = None,
        max_file_bytes: int = 2_000_000,
    ) -> None:
        self.name = name
        self.root = Path(root)
        self.visibility = visibility
        self.labels = dict(labels or {})
        self.max_file_bytes = max_file_bytes
        self._include = compiled_spec(tuple(include))
        self._exclude = compiled_spec(tuple(exclude))

    def __repr__(self) -> str:
        return f"FilesystemSource({self.name!r}, {str(self.root)!r})"

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        """Every matching file as a Document, or a SourceFailure saying why it could not
        be read. Raises SourceError (before yielding anything) when the root or any
        directory under it cannot be listed, because a partial listing would make sync
        prune documents that still exist."""
        paths = await asyncio.to_thread(self.list_files)
        committed = await asyncio.to_thread(self.commit_times) if paths else {}
        batches = [paths[start : start + _READ_BATCH] for start in range(0, len(paths), _READ_BATCH)]

        def read(number: int) -> asyncio.Future[list[Document | SourceFailure]] | None:
            if number == len(batches):
                return None
            return asyncio.ensure_future(asyncio.to_thread(self._read_batch, batches[number], committed))

        number, ahead = 0, read(0)
        try:
            while ahead is not None:
                items = await ahead
                number += 1
                ahead = read(number)  # the next batch is read while the caller works on this one
                for item in items:
                    yield item
        finally:
            if ahead is not None:
                ahead.cancel()

    def resume_token(self) -> str | None:
        return None

    def preflight(self) -> None:
        """A root that does not exist is a mistake in lore.toml (exit 2, nothing created),
        not a listing failure; an existing but empty folder is left to sync's prune guard."""
        if not self.root.is_dir():
            what = "is not a directory" if self.root.exists() else "does not exist"
            raise ConfigError(f"source {self.name!r}: path {self.root} {what}; fix its path in lore.toml")

    def uri_for(self, relative: str) -> str:
        """``file://<source name>/<path relative to the root>``: stable across machines."""
        return f"file://{self.name}/{relative}"

    def list_files(self) -> list[str]:
        """Relative POSIX paths of the matching files, sorted."""
        if not self.root.is_dir():
            raise SourceError(f"source {self.name!r}: {self.root} is not a directory")
        found: list[str] = []

        def unlistable(err: OSError) -> None:
            raise SourceError(f"source {self.name!r}: cannot list {err.filename}: {err.strerror}") from err

        for directory, subdirectories, files in os.walk(self.root, onerror=unlistable):
            base = PurePosixPath(Path(directory).relative_to(self.root).as_posix())
            subdirectories[:] = [
                sub for sub in subdirectories if not self._exclude.match_file(f"{_join(base, sub)}/")
            ]
            for file in files:
                relative = _join(base, file)
                if self._include.match_file(relative) and not self._exclude.match_file(relative):
                    found.append(relative)
        return sorted(found)

    def commit_times(self) -> Mapping[str, datetime]:
        """Each tracked file's last commit time, when the root is inside a git work tree."""
        return last_commit_times(self.root)

    def _read_batch(
        self, paths: Sequence[str], committed: Mapping[str, datetime]
    ) -> list[Document | SourceFailure]:
        return [self._read(relative, committed.get(relative)) for relative in paths]

    def _read(self, relative: str, committed: datetime | None = None) -> Document | SourceFailure:
        """``committed``: the file's last commit time when the folder is in a git work tree
        and the file is unmodified there; else the file's mtime stands for its last change."""
        if (misnamed := not_text_reason(relative)) is not None:
            return SourceFailure(self.uri_for(escape_name(relative)), misnamed)
        uri = self.uri_for(relative)
        path = self.root / relative
        try:
            if path.is_symlink() and not path.resolve(strict=True).is_relative_to(self.root.resolve()):
                return SourceFailure(uri, "symbolic link to a file outside the source root; not read")
            # Checked before opening, so a device is never opened, and again on the open
            # descriptor (below), in case the path was swapped in between.
            if (kind := _special_kind(path.stat().st_mode)) is not None:
                return SourceFailure(uri, f"not a regular file ({kind}); skipped")
            read = self._read_regular(path)
        except (OSError, RuntimeError) as err:  # RuntimeError: a symlink loop
            return SourceFailure(uri, f"cannot read file: {getattr(err, 'strerror', None) or err}")
        if isinstance(read, str):
            return SourceFailure(uri, read)
        data, mtime = read
        if PurePosixPath(relative).suffix.lower() in CONVERTED_SUFFIXES:
            return self._converted(relative, data, committed or datetime.fromtimestamp(mtime, UTC))
        text = decode_text(uri, data)
        if isinstance(text, SourceFailure):
            return text
        changed = committed or datetime.fromtimestamp(mtime, UTC)
        return self._document(relative, text, hashlib.sha256(data).hexdigest(), changed)

    def _converted(self, relative: str, data: bytes, changed: datetime) -> Document | SourceFailure:
        """A PDF, DOCX or HTML file as its Markdown. The revision is the file's sha256 with
        the converter's version appended, so a better converter reaches unchanged files."""
        try:
            found = extract(data, relative, max_bytes=self.max_file_bytes)
        except ExtractionError as err:
            return SourceFailure(self.uri_for(relative), err.reason)
        revision = f"{hashlib.sha256(data).hexdigest()}+extract-{EXTRACTION_VERSION}"
        document = self._document(relative, found.markdown, revision, changed)
        return replace(document, title=found.title or document.title, media_type=found.media_type)

    def _read_regular(self, path: Path) -> tuple[bytes, float] | str:
        """The bytes and mtime of a regular file, or why it was not read. O_NONBLOCK: a FIFO
        opened for reading blocks until a writer appears (forever, holding sync's write
        lock); with it, the open returns at once and fstat says what was opened."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if (kind := _special_kind(info.st_mode)) is not None:
                return f"not a regular file ({kind}); skipped"
            if info.st_size > self.max_file_bytes:
                return too_large(info.st_size, self.max_file_bytes)
            # One byte over the limit tells a file that grew since fstat from one that fits.
            data = handle.read(self.max_file_bytes + 1)
        if len(data) > self.max_file_bytes:
            return f"file grew past this source's max_file_bytes ({self.max_file_bytes:,}) while read"
        return data, info.st_mtime

    def _document(self, relative: str, text: str, revision: str, changed: datetime) -> Document:
        return file_document(
            self.uri_for(relative), PurePosixPath(relative), text,
            revision=revision, updated_at=changed, labels=self.labels, front_matter_dates=True,
        )  # fmt: skip


def file_document(
    uri: str,
    relative: PurePosixPath,
    text: str,
    *,
    revision: str,
    updated_at: datetime,
    labels: Mapping[str, str],
    front_matter_dates: bool,
) -> Document:
    """A file's Document, for every source that reads files (folders, git, the pack): the
    media type from the suffix, front matter split off into labels, the title, the
    ``folder`` label from ``relative`` (the path below the source's root), then the
    source's own ``labels``. ``front_matter_dates``: an ``updated:`` key wins over
    ``updated_at`` (a folder's mtime; not a git commit time, which is the truth there)."""
    # Here, not at the top: every command validates this module's CONFIG_MODEL when it
    # loads settings, and a search must not pay for the Markdown parser's import.
    from lore.chunking import FRONT_MATTER_MEDIA_TYPES, split_front_matter

    media_type = MEDIA_TYPES.get(relative.suffix.lower(), "text/plain")
    metadata: dict[str, Any] = {}
    body = text
    if media_type in FRONT_MATTER_MEDIA_TYPES:
        metadata, body = split_front_matter(text)
    document_labels = front_matter_labels(metadata)
    if str(relative.parent) != ".":
        document_labels[FOLDER_LABEL] = str(relative.parent)
    document_labels.update(labels)
    declared = _updated_at(metadata) if front_matter_dates else None
    return Document(
        uri=uri,
        title=_title(metadata, body, media_type, relative),
        text=body,
        revision=revision,
        updated_at=declared or updated_at,
        labels=document_labels,
        media_type=media_type,
    )


def _special_kind(mode: int) -> str | None:
    """What a non-regular file is, for the report; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _join(base: PurePosixPath, name: str) -> str:
    return name if str(base) == "." else f"{base}/{name}"


def _title(metadata: Mapping[str, Any], body: str, media_type: str, path: PurePosixPath) -> str:
    declared = metadata.get("title")
    if isinstance(declared, str | int | float) and str(declared).strip():
        return str(declared).strip()
    from lore.text_blocks import markdown_title, rst_title  # see ``_document``

    heading = {"text/markdown": markdown_title, "text/x-rst": rst_title}.get(media_type)
    if heading is not None and (found := heading(body)):
        return found
    return humanise_stem(path)


def humanise_stem(path: PurePosixPath) -> str:
    """``disk-full_runbook.md`` -> "Disk full runbook"; a README or index page is named
    after its folder."""
    stem = path.stem
    if stem.lower().lstrip("_") in ("readme", "index") and path.parent.name:
        stem = path.parent.name
    words = re.sub(r"[-_\s]+", " ", stem).strip() or stem
    return words[:1].upper() + words[1:]


def _updated_at(metadata: Mapping[str, Any]) -> datetime | None:
    for key in UPDATED_KEYS:
        value = metadata.get(key)
        if isinstance(value, datetime):
            return utc(value)
        if isinstance(value, date):
            return datetime(value.year, value.month, value.day, tzinfo=UTC)
        if isinstance(value, str):
            try:
                return utc(datetime.fromisoformat(value.strip()))
            except ValueError:
                continue
    return None


def _label_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, date | datetime):
        return value.isoformat()
    if isinstance(value, str | int | float):
        text = " ".join(str(value).split())
        return text if 0 < len(text) <= MAX_LABEL_VALUE_CHARS else None
    return None


def front_matter_labels(metadata: Mapping[str, Any]) -> dict[str, str]:
    """Scalar front-matter values as labels; lists (``tags: [etcd, raft]``) are joined
    with ``LABEL_VALUE_SEPARATOR`` so each value can be filtered on. Nested tables and the
    title (already the document's title) are left out."""
    labels: dict[str, str] = {}
    for key, value in metadata.items():
        if key == "title":
            continue
        if isinstance(value, list | tuple):
            parts = [part for item in value if (part := _label_value(item))]
            joined = LABEL_VALUE_SEPARATOR.join(parts)
            if parts and len(joined) <= MAX_LABEL_VALUE_CHARS:
                labels[key] = joined
        elif (single := _label_value(value)) is not None:
            labels[key] = single
    return labels


def from_config(
    config: FilesystemSourceConfig, settings: LoreSettings, visibility: Visibility | None
) -> FilesystemSource:
    """The ``[[sources]]`` table of ``type = "filesystem"``; a relative ``path`` is
    relative to the lore.toml it is written in."""
    if config.path is None:
        raise ConfigError(f"source {config.name!r}: a filesystem source needs a path")
    return FilesystemSource(
        config.name,
        settings.resolve_path(config.path),
        visibility=visibility,
        include=config.include,
        exclude=config.exclude,
        labels=config.labels,
        max_file_bytes=config.max_file_bytes,
    )
