"""Every source type through the shared source-conformance suite (lore.testing.source_conformance):
a folder, a git repository served by ``git http-backend`` on 127.0.0.1, and the built-in
playbook pack read from a copy the test can edit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from git_servers import SmartHttpServer, Upstream
from lore.models import Visibility
from lore.protocols import KnowledgeSource
from lore.sources.filesystem import FilesystemSource
from lore.sources.git import GitSourceConfig, git_source
from lore.sources.vault import VAULT_URI_PREFIX, VaultSource
from lore.testing.source_conformance import SourceConformance

#: Every upstream's clock starts here and moves an hour per change: in the past, distinct.
EPOCH = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
UNREADABLE = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


def markdown(title: str, body: str) -> str:
    return f"# {title}\n\n{body}\n"


class FolderUpstream:
    """A folder of Markdown files; each change sets the file's mtime from the clock."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True)
        self.changes = 0
        self.times: dict[str, datetime] = {}

    def _write(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.changes += 1
        when = EPOCH + timedelta(hours=self.changes)
        os.utime(path, (when.timestamp(), when.timestamp()))
        self.times[key] = when

    def put(self, key: str, title: str, body: str) -> None:
        self._write(key, markdown(title, body).encode())

    def put_unreadable(self, key: str) -> None:
        self._write(key, UNREADABLE)

    def delete(self, key: str) -> None:
        (self.root / key).unlink()

    def updated_at(self, key: str) -> datetime:
        return self.times[key]

    def uri(self, key: str) -> str:
        return f"file://handbook/{key}"

    def source(self, visibility: Visibility | None = Visibility.ALL_VIEWERS) -> KnowledgeSource:
        return FilesystemSource("handbook", self.root, visibility=visibility)


class TestFilesystemConformance(SourceConformance):
    @pytest.fixture
    def upstream(self, tmp_path: Path) -> FolderUpstream:
        return FolderUpstream(tmp_path / "docs")


class GitUpstream:
    """A repository where each change is one commit (dated by the clock), pushed to the
    bare repository the smart-HTTP server serves."""

    def __init__(self, repo: Upstream, server: SmartHttpServer, data_dir: Path) -> None:
        self.repo = repo
        self.server = server
        self.data_dir = data_dir
        self.changes = 0
        self.times: dict[str, datetime] = {}

    def _commit(self, key: str) -> None:
        self.changes += 1
        when = EPOCH + timedelta(hours=self.changes)
        self.repo.commit(f"change {self.changes}", when)
        self.repo.push()
        self.times[key] = when

    def put(self, key: str, title: str, body: str) -> None:
        self.repo.write(key, markdown(title, body))
        self._commit(key)

    def put_unreadable(self, key: str) -> None:
        self.repo.write(key, UNREADABLE)
        self._commit(key)

    def delete(self, key: str) -> None:
        (self.repo.work / key).unlink()
        self._commit(key)

    def updated_at(self, key: str) -> datetime:
        return self.times[key]

    def uri(self, key: str) -> str:
        return f"git://runbooks@{key}"

    def source(self, visibility: Visibility | None = Visibility.ALL_VIEWERS) -> KnowledgeSource:
        config = GitSourceConfig(
            name="runbooks",
            url=self.server.url(),
            allow_private_hosts=True,
            visibility=None if visibility is None else visibility.value,
        )
        return git_source(config, self.data_dir)


class TestGitConformance(SourceConformance):
    supports_incremental = True

    @pytest.fixture
    def upstream(self, tmp_path: Path) -> Iterator[GitUpstream]:
        repo = Upstream(tmp_path / "upstream")
        server = SmartHttpServer(repo.bare.parent, token=None).start()
        yield GitUpstream(repo, server, tmp_path / "data")
        server.stop()


class PackUpstream:
    """A copy of a playbook pack in a folder, read as the installed pack is; every
    playbook's date is the pack's release date."""

    released = EPOCH

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True)

    def put(self, key: str, title: str, body: str) -> None:
        (self.root / key).parent.mkdir(parents=True, exist_ok=True)
        (self.root / key).write_text(markdown(title, body), encoding="utf-8")

    def put_unreadable(self, key: str) -> None:
        (self.root / key).write_bytes(UNREADABLE)

    def delete(self, key: str) -> None:
        (self.root / key).unlink()

    def updated_at(self, key: str) -> datetime:
        return self.released

    def uri(self, key: str) -> str:
        return f"{VAULT_URI_PREFIX}{key}"

    def source(self, visibility: Visibility | None = Visibility.ALL_VIEWERS) -> KnowledgeSource:
        return VaultSource(self.root, lore_version="9.9.9", released=self.released)


class TestVaultConformance(SourceConformance):
    visibility_configurable = False

    @pytest.fixture
    def upstream(self, tmp_path: Path) -> PackUpstream:
        return PackUpstream(tmp_path / "pack")
