"""The service's own sources pass the shared source-conformance suite: notes (``manual``)
and uploads (``upload``), each a folder of lore-written Markdown files under the data dir."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from lore.models import Visibility
from lore.protocols import KnowledgeSource
from lore.sources.manual import ManualSource
from lore.sources.stored import StoredSource, slugify
from lore.sources.upload import UploadSource
from lore.testing.source_conformance import SourceConformance
from test_source_conformance import EPOCH, UNREADABLE, markdown


class StoredUpstream:
    """A stored source's folder, written as lore writes it, with each change dated by a
    clock in the past (the ``updated`` its front matter records)."""

    def __init__(self, root: Path, kind: type[StoredSource]) -> None:
        self.root = root
        self.kind = kind
        self.root.mkdir(parents=True)
        self.changes = 0
        self.times: dict[str, datetime] = {}

    def _slug(self, key: str) -> str:
        return slugify(key.removesuffix(".md").replace("/", "-"))

    def _write(self, key: str, data: bytes) -> None:
        (self.root / f"{self._slug(key)}.md").write_bytes(data)

    def put(self, key: str, title: str, body: str) -> None:
        self.changes += 1
        when = EPOCH + timedelta(hours=self.changes)
        header = yaml.safe_dump({"title": title, "updated": when.isoformat()}, sort_keys=False)
        self._write(key, f"---\n{header}---\n{markdown(title, body)}".encode())
        self.times[key] = when

    def put_unreadable(self, key: str) -> None:
        self._write(key, UNREADABLE)

    def delete(self, key: str) -> None:
        (self.root / f"{self._slug(key)}.md").unlink()

    def updated_at(self, key: str) -> datetime:
        return self.times[key]

    def uri(self, key: str) -> str:
        return f"{self.kind.scheme}://shelf/{self._slug(key)}"

    def source(self, visibility: Visibility | None = Visibility.ALL_VIEWERS) -> KnowledgeSource:
        if self.kind is UploadSource:
            return UploadSource("shelf", self.root, self.root.parent / "originals", visibility=visibility)
        return ManualSource("shelf", self.root, visibility=visibility)


class TestManualConformance(SourceConformance):
    @pytest.fixture
    def upstream(self, tmp_path: Path) -> StoredUpstream:
        return StoredUpstream(tmp_path / "notes", ManualSource)


class TestUploadConformance(SourceConformance):
    @pytest.fixture
    def upstream(self, tmp_path: Path) -> StoredUpstream:
        return StoredUpstream(tmp_path / "uploads", UploadSource)
