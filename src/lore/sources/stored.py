"""Documents the service writes itself: uploads and notes, one Markdown file each.

The ``upload`` and ``manual`` sources (``upload.py``, ``manual.py``) keep their documents
in a folder under the data dir, one ``<slug>.md`` per document with its provenance in
YAML front matter (title, updated, and for uploads the original's sha256). One file per
document means one atomic replace per write: a crash mid-write leaves the old version or
the new, never a new body under an old title. Every write goes to a temporary file in the
same folder, is fsynced, then ``os.replace``d over the old one, and the folder is fsynced
so the rename itself survives a power cut.

Listing is complete every time (``incremental = False``): sync compares revisions (the
sha256 of the body), so only what changed is chunked and embedded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import yaml

from lore.errors import DocumentError, SourceError
from lore.models import Document, SourceFailure, SourceItem, Visibility, utc
from lore.source_tables.stored import StoredSourceConfig as StoredSourceConfig

#: Slugs are file names and uri paths: lower-case letters, digits, dots, dashes.
_UNSAFE = re.compile(r"[^a-z0-9._-]+")
MAX_SLUG_CHARS = 80
_FENCE = "---\n"


def slugify(text: str, default: str = "document") -> str:
    slug = _UNSAFE.sub("-", text.strip().lower()).strip("-.")[:MAX_SLUG_CHARS].strip("-.")
    return slug or default


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """``path`` holds ``data`` or what it held before, whatever happens meanwhile; private
    to this user by default, as everything lore writes (``lore.private_files``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)


def remove_durably(path: Path) -> bool:
    """Delete ``path``; False when it was not there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


@dataclass(frozen=True)
class StoredDocument:
    uri: str
    slug: str
    title: str
    markdown: str
    updated_at: datetime
    #: Front-matter keys beyond title and updated (``filename``, ``original``, ``media_type``).
    meta: Mapping[str, str]

    @property
    def revision(self) -> str:
        return hashlib.sha256(self.markdown.encode("utf-8")).hexdigest()


class StoredSource:
    """A folder of ``<slug>.md`` files, each one document with uri ``<scheme>://<name>/<slug>``."""

    source_type = ""
    scheme = ""
    incremental = False

    def __init__(
        self,
        name: str,
        folder: Path,
        *,
        visibility: Visibility | None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.folder = Path(folder)
        self.visibility = visibility
        self.labels = dict(labels or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {str(self.folder)!r})"

    # -- naming ----------------------------------------------------------------------

    def uri_for(self, slug: str) -> str:
        return f"{self.scheme}://{self.name}/{slug}"

    def slug_of(self, uri: str) -> str | None:
        """The slug of one of this source's uris, else None."""
        prefix = f"{self.scheme}://{self.name}/"
        if not uri.startswith(prefix):
            return None
        slug = uri[len(prefix) :]
        return slug if slug and slugify(slug) == slug else None

    def free_slug(self, wanted: str) -> str:
        """``wanted``, or ``wanted-2``, ``wanted-3``... whichever no document has yet."""
        slug, number = wanted, 1
        while self._path(slug).exists():
            number += 1
            slug = f"{wanted}-{number}"
        return slug

    def _path(self, slug: str) -> Path:
        return self.folder / f"{slug}.md"

    # -- reading ---------------------------------------------------------------------

    def read(self, slug: str) -> StoredDocument | None:
        path = self._path(slug)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as err:
            raise DocumentError(f"cannot read {self.uri_for(slug)}: {err}") from err
        return self._parse(slug, raw, path)

    def _parse(self, slug: str, raw: str, path: Path) -> StoredDocument:
        header, fence, body = raw.removeprefix(_FENCE).partition("\n" + _FENCE)
        try:
            fields = yaml.safe_load(header) if raw.startswith(_FENCE) and fence else None
        except yaml.YAMLError as err:  # a hand-edited file with broken YAML
            raise DocumentError(f"cannot parse the front matter of {path}: {err}") from err
        if not isinstance(fields, dict):
            raise DocumentError(f"{path} has no front matter; it was not written by lore")
        meta = {str(key): str(value) for key, value in fields.items()}
        title = meta.pop("title", "") or slug
        updated = _parse_time(meta.pop("updated", None), path)
        return StoredDocument(self.uri_for(slug), slug, title, body, updated, meta)

    def stored(self) -> list[str]:
        """Slugs held, sorted."""
        try:
            return sorted(
                entry.name[:-3]
                for entry in os.scandir(self.folder)
                if entry.name.endswith(".md") and not entry.name.startswith(".") and entry.is_file()
            )
        except FileNotFoundError:
            return []
        except OSError as err:
            raise SourceError(f"cannot list {self.folder}: {err}") from err

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        for slug in await asyncio.to_thread(self.stored):
            try:
                stored = await asyncio.to_thread(self.read, slug)
            except DocumentError as err:
                yield SourceFailure(self.uri_for(slug), str(err))
                continue
            if stored is not None:
                yield self.to_document(stored)

    def to_document(self, stored: StoredDocument) -> Document:
        return Document(
            uri=stored.uri,
            title=stored.title,
            text=stored.markdown,
            revision=stored.revision,
            updated_at=stored.updated_at,
            labels=dict(self.labels),
            media_type=stored.meta.get("media_type", "text/markdown"),
        )

    def resume_token(self) -> str | None:
        return None

    # -- writing ---------------------------------------------------------------------

    def write(
        self, slug: str, title: str, markdown: str, meta: Mapping[str, str] | None = None
    ) -> StoredDocument:
        """Create or replace one document, durably and atomically."""
        updated = datetime.now(UTC).replace(microsecond=0)
        fields: dict[str, Any] = {"title": title, "updated": updated.isoformat(), **dict(meta or {})}
        # The body is kept byte for byte after the front matter: what was written is read.
        header = yaml.safe_dump(fields, sort_keys=False, allow_unicode=True)
        write_atomic(self._path(slug), f"{_FENCE}{header}{_FENCE}{markdown}".encode())
        return StoredDocument(self.uri_for(slug), slug, title, markdown, updated, dict(meta or {}))

    def remove(self, slug: str) -> bool:
        return remove_durably(self._path(slug))


def _parse_time(value: str | None, path: Path) -> datetime:
    if value:
        with contextlib.suppress(ValueError):
            return utc(datetime.fromisoformat(value))
        with contextlib.suppress(ValueError):
            return datetime.combine(date.fromisoformat(value), datetime.min.time(), UTC)
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)
