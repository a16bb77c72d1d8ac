"""The filesystem source over real temporary directories, and ``build_source``."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath

import pytest

from lore.chunking import Chunker
from lore.config import LoreSettings, SourceConfig, load_settings
from lore.errors import ConfigError, SourceError
from lore.models import Document, SourceFailure, SourceItem, Visibility
from lore.protocols import KnowledgeSource
from lore.sources import build_source
from lore.sources.filesystem import DEFAULT_INCLUDE, FilesystemSource, humanise_stem

MTIME = datetime(2023, 3, 4, 5, 6, 7, tzinfo=UTC)


def write(root: Path, relative: str, content: str | bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    os.utime(path, (MTIME.timestamp(), MTIME.timestamp()))
    return path


def source(root: Path, **overrides: object) -> FilesystemSource:
    options: dict[str, object] = {
        "visibility": Visibility.ALL_VIEWERS,
        "include": DEFAULT_INCLUDE,
        "exclude": [".git/", "**/node_modules/", "drafts/"],
    } | overrides
    return FilesystemSource("runbooks", root, **options)  # type: ignore[arg-type]


async def collect(src: FilesystemSource) -> dict[str, SourceItem]:
    return {item.uri: item async for item in src.documents()}


def document(items: dict[str, SourceItem], uri: str) -> Document:
    item = items[uri]
    assert isinstance(item, Document), item
    return item


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "runbooks"
    write(root, "disk-full.md",
          "---\ntitle: Disk full\ntags: [storage, linux]\nseverity: page\nupdated: 2024-02-01\n"
          "owner:\n  team: sre\n---\n\n# Ignored H1\n\nRun df.\n")
    write(root, "alerts/etcd/etcd_no_leader.md", "Preamble.\n\n# etcd has no leader\n\n## Fix\n\nRestart.\n")
    write(root, "alerts/setext.md", "Kafka consumer lag\n==================\n\nCheck the group.\n")
    write(root, "notes/plain-notes.txt", "Some plain notes.\n")
    write(root, "adr/0001-use-sqlite.rst", "Use SQLite\n==========\n\nBecause it is embedded.\n")
    write(root, "config/service.yaml", "---\nservice: api\n")
    write(root, "config/limits.json", '{"cpu": 2}\n')
    write(root, "config/app.toml", 'name = "app"\n')
    write(root, "images/diagram.png", b"\x89PNG\r\n\x1a\n\x00\x00")
    write(root, "node_modules/pkg/README.md", "# vendored\n")
    write(root, "drafts/wip.md", "# not ready\n")
    write(root, ".git/HEAD.md", "# git internals\n")
    return root


async def test_yields_every_matching_file_in_sorted_order_with_portable_uris(corpus: Path) -> None:
    items = await collect(source(corpus))

    assert list(items) == [
        "file://runbooks/adr/0001-use-sqlite.rst",
        "file://runbooks/alerts/etcd/etcd_no_leader.md",
        "file://runbooks/alerts/setext.md",
        "file://runbooks/config/app.toml",
        "file://runbooks/config/limits.json",
        "file://runbooks/config/service.yaml",
        "file://runbooks/disk-full.md",
        "file://runbooks/notes/plain-notes.txt",
    ]
    assert all(str(corpus) not in uri for uri in items)


async def test_front_matter_gives_title_labels_and_updated_at(corpus: Path) -> None:
    items = await collect(source(corpus, labels={"env": "prod", "severity": "overridden"}))
    disk = document(items, "file://runbooks/disk-full.md")

    assert disk.title == "Disk full"
    assert disk.text == "# Ignored H1\n\nRun df.\n"
    assert disk.updated_at == datetime(2024, 2, 1, tzinfo=UTC)
    # Configured labels win over front matter; nested tables are not labels.
    assert disk.labels == {"tags": "storage,linux", "severity": "overridden", "updated": "2024-02-01",
                           "env": "prod"}
    assert disk.media_type == "text/markdown"
    assert disk.revision == hashlib.sha256((corpus / "disk-full.md").read_bytes()).hexdigest()


async def test_titles_fall_back_to_first_h1_then_setext_then_rst_then_file_name(corpus: Path) -> None:
    items = await collect(source(corpus))

    assert document(items, "file://runbooks/alerts/etcd/etcd_no_leader.md").title == "etcd has no leader"
    assert document(items, "file://runbooks/alerts/setext.md").title == "Kafka consumer lag"
    assert document(items, "file://runbooks/adr/0001-use-sqlite.rst").title == "Use SQLite"
    assert document(items, "file://runbooks/notes/plain-notes.txt").title == "Plain notes"


async def test_path_labels_media_types_and_mtime(corpus: Path) -> None:
    items = await collect(source(corpus))
    etcd = document(items, "file://runbooks/alerts/etcd/etcd_no_leader.md")

    assert etcd.labels == {"folder": "alerts/etcd"}
    assert etcd.updated_at == MTIME
    assert "folder" not in document(items, "file://runbooks/disk-full.md").labels
    media = {uri.rsplit(".", 1)[1]: document(items, uri).media_type for uri in items}
    assert media == {"rst": "text/x-rst", "md": "text/markdown", "toml": "application/toml",
                     "json": "application/json", "yaml": "application/yaml", "txt": "text/plain"}
    # A YAML file's leading "---" is a document marker, not front matter.
    assert document(items, "file://runbooks/config/service.yaml").text == "---\nservice: api\n"


async def test_unreadable_files_are_reported_not_raised(tmp_path: Path) -> None:
    write(tmp_path, "good.md", "# Good\n")
    write(tmp_path, "binary.md", b"# looks like text\x00\x01\x02")
    write(tmp_path, "latin1.md", "# Café\n".encode("latin-1"))
    write(tmp_path, "huge.md", "x" * 2_000)

    items = await collect(source(tmp_path, max_file_bytes=1_000))

    assert isinstance(items["file://runbooks/good.md"], Document)
    reasons = {uri: item.reason for uri, item in items.items() if isinstance(item, SourceFailure)}
    assert "binary" in reasons["file://runbooks/binary.md"]
    assert "not valid UTF-8" in reasons["file://runbooks/latin1.md"]
    assert "2,000 bytes" in reasons["file://runbooks/huge.md"]
    assert "max_file_bytes" in reasons["file://runbooks/huge.md"]


async def test_a_symlink_out_of_the_root_is_not_followed(tmp_path: Path) -> None:
    outside = write(tmp_path, "outside/secret.md", "# Not for this source\n")
    root = tmp_path / "root"
    write(root, "inside.md", "# Inside\n")
    (root / "link.md").symlink_to(outside)

    items = await collect(source(root))

    failure = items["file://runbooks/link.md"]
    assert isinstance(failure, SourceFailure)
    assert "outside the source root" in failure.reason


async def test_byte_order_mark_is_dropped_and_revision_follows_content(tmp_path: Path) -> None:
    path = write(tmp_path, "bom.md", "\ufeff---\ntitle: BOM\n---\nBody\n")
    first = document(await collect(source(tmp_path)), "file://runbooks/bom.md")
    path.write_text("---\ntitle: BOM\n---\nBody changed\n", encoding="utf-8")
    second = document(await collect(source(tmp_path)), "file://runbooks/bom.md")

    assert (first.title, first.text) == ("BOM", "Body\n")
    assert first.revision != second.revision


def collect_in_a_daemon_thread(src: FilesystemSource) -> dict[str, SourceItem]:
    """``collect`` on a daemon thread: a read that blocks forever (a FIFO opened without
    O_NONBLOCK) fails the test instead of hanging the whole session."""
    found: list[dict[str, SourceItem]] = []
    worker = threading.Thread(target=lambda: found.append(asyncio.run(collect(src))), daemon=True)
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():
        for fifo in (p for p in src.root.rglob("*") if p.is_fifo()):
            with contextlib.suppress(OSError):  # a writer lets a blocked reader go
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading the source blocked")
    return found[0]


def test_a_fifo_or_socket_named_like_a_runbook_is_skipped_and_reported(tmp_path: Path) -> None:
    write(tmp_path, "good.md", "# Good\n")
    os.mkfifo(tmp_path / "x.md")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "listening.md"))
        (tmp_path / "to-fifo.md").symlink_to(tmp_path / "x.md")

        items = collect_in_a_daemon_thread(source(tmp_path))

    assert isinstance(items["file://runbooks/good.md"], Document)
    reasons = {uri: item.reason for uri, item in items.items() if isinstance(item, SourceFailure)}
    assert reasons == {
        "file://runbooks/x.md": "not a regular file (a FIFO); skipped",
        "file://runbooks/to-fifo.md": "not a regular file (a FIFO); skipped",
        "file://runbooks/listening.md": "not a regular file (a socket); skipped",
    }


def git(root: Path, *args: str, when: datetime | None = None) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when.isoformat()
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


FIRST_COMMIT = datetime(2021, 5, 6, 7, 8, 9, tzinfo=UTC)
SECOND_COMMIT = datetime(2022, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A work tree whose source folder is a subdirectory, as in most repositories: three
    committed files, one changed in a later commit, a merge, and a file outside the folder."""
    if shutil.which("git") is None:
        pytest.skip("no git binary")
    repo = tmp_path / "repo"
    write(repo, "docs/old.md", "# Old\n")
    write(repo, "docs/edited.md", "# Edited\n")
    write(repo, "docs/with space.md", "# Spaced name\n")
    write(repo, "docs/dated.md", "---\nupdated: 2019-09-09\n---\n# Dated\n")
    write(repo, "README.md", "# Repository\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first", when=FIRST_COMMIT)
    git(repo, "checkout", "-q", "-b", "side")
    write(repo, "docs/edited.md", "# Edited again\n")
    git(repo, "commit", "-q", "-am", "second", when=SECOND_COMMIT)
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge", "side", when=SECOND_COMMIT + timedelta(days=1))
    return repo


async def test_updated_at_is_the_last_commit_that_touched_the_file(checkout: Path) -> None:
    write(checkout, "docs/modified.md", "# Committed\n")
    git(checkout, "add", ".")
    git(checkout, "commit", "-q", "-m", "third", when=SECOND_COMMIT + timedelta(days=2))
    write(checkout, "docs/modified.md", "# Changed, not committed\n")
    write(checkout, "docs/untracked.md", "# New\n")

    items = await collect(source(checkout / "docs"))
    updated = {uri.rsplit("/", 1)[1]: document(items, uri).updated_at for uri in items}

    assert updated == {
        "old.md": FIRST_COMMIT,
        "with space.md": FIRST_COMMIT,
        "edited.md": SECOND_COMMIT,
        "dated.md": datetime(2019, 9, 9, tzinfo=UTC),  # front matter still wins
        "modified.md": MTIME,  # a working copy that differs from HEAD: its mtime
        "untracked.md": MTIME,
    }


async def test_one_git_pass_for_the_whole_folder(checkout: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrapper ``git`` first on PATH counts invocations: a constant few, not one per file."""
    for number in range(40):
        write(checkout, f"docs/many/page-{number}.md", f"# Page {number}\n")
    git(checkout, "add", ".")
    git(checkout, "commit", "-q", "-m", "many", when=SECOND_COMMIT)
    shim_dir, calls = tmp_path / "shim", tmp_path / "git-calls"
    shim_dir.mkdir()
    shim = shim_dir / "git"
    shim.write_text(f'#!/bin/sh\necho "$1" >> {calls}\nexec {shutil.which("git")} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim_dir}{os.pathsep}{os.environ['PATH']}")

    items = await collect(source(checkout / "docs"))

    assert document(items, "file://runbooks/many/page-7.md").updated_at == SECOND_COMMIT
    assert calls.read_text().split() == ["rev-parse", "log", "diff"]


async def test_without_git_or_outside_a_work_tree_mtime_stands(checkout: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    write(plain, "page.md", "# Not in a repository\n")
    outside = await collect(source(plain))
    monkeypatch.setenv("PATH", str(tmp_path / "no-binaries-here"))
    no_git = await collect(source(checkout / "docs"))

    assert document(outside, "file://runbooks/page.md").updated_at == MTIME
    assert document(no_git, "file://runbooks/old.md").updated_at == MTIME


async def test_include_and_exclude_globs(corpus: Path) -> None:
    only_alerts = await collect(source(corpus, include=["alerts/**/*.md"], exclude=["**/setext.md"]))

    assert list(only_alerts) == ["file://runbooks/alerts/etcd/etcd_no_leader.md"]


async def test_a_missing_root_raises_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="not a directory"):
        await collect(source(tmp_path / "missing"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read a directory without permissions")
async def test_an_unlistable_directory_raises_rather_than_listing_partially(tmp_path: Path) -> None:
    write(tmp_path, "ok.md", "# ok\n")
    locked = tmp_path / "locked"
    write(locked, "hidden.md", "# hidden\n")
    locked.chmod(0)
    try:
        with pytest.raises(SourceError, match="cannot list"):
            await collect(source(tmp_path))
    finally:
        locked.chmod(0o755)


def test_the_source_satisfies_the_protocol(tmp_path: Path) -> None:
    src = source(tmp_path)

    assert isinstance(src, KnowledgeSource)
    assert (src.name, src.source_type, src.incremental, src.resume_token()) == (
        "runbooks", "filesystem", False, None
    )


@pytest.mark.parametrize(
    ("path", "expected"),
    [("disk-full_runbook.md", "Disk full runbook"), ("certs/README.md", "Certs"),
     ("NodeDown.md", "NodeDown")],
)
def test_humanised_file_names(path: str, expected: str) -> None:
    assert humanise_stem(PurePosixPath(path)) == expected


# -- build_source -----------------------------------------------------------------------


def test_build_source_resolves_paths_against_the_config_file(tmp_path: Path) -> None:
    write(tmp_path, "docs/a.md", "# A\n")
    config_file = tmp_path / "lore.toml"
    config_file.write_text(
        '[[sources]]\nname = "docs"\npath = "docs"\nvisibility = "all-viewers"\n'
        'labels = { team = "sre" }\nmax_file_bytes = 1234\n'
    )
    settings = load_settings(config_file)

    src = build_source(settings.sources[0], settings)

    assert isinstance(src, FilesystemSource)
    assert src.root == tmp_path / "docs"
    assert (src.visibility, src.labels, src.max_file_bytes) == (Visibility.ALL_VIEWERS, {"team": "sre"}, 1234)


def test_build_source_leaves_an_undeclared_visibility_to_sync(tmp_path: Path) -> None:
    src = build_source(SourceConfig(name="docs", path=tmp_path), LoreSettings())

    assert src.visibility is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (SourceConfig(name="docs", type="sharepoint", path=Path()),
         r"unknown type 'sharepoint'; valid types: (\w+, )*filesystem"),
        (SourceConfig(name="docs", path=Path(), visibility="everyone"),
         r"unknown visibility 'everyone'; valid values: 'all-viewers', 'restricted'"),
        (SourceConfig(name="docs", visibility="all-viewers"), "needs a path"),
    ],
)
def test_build_source_config_errors(config: SourceConfig, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_source(config, LoreSettings())


# -- the real corpora -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.shared
async def test_every_shared_markdown_file_becomes_a_document_and_chunks(shared_root: Path) -> None:
    chunker = Chunker(max_tokens=224)
    for corpus in sorted(p for p in (shared_root / "corpora").iterdir() if p.is_dir()):
        markdown = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.md"))
        items = await collect(FilesystemSource(corpus.name, corpus, visibility=Visibility.ALL_VIEWERS,
                                               include=["**/*.md"]))

        assert [uri.split("/", 3)[3] for uri in items] == markdown
        for item in items.values():
            assert isinstance(item, Document), item
            assert item.title
            chunks = chunker.chunk(item)
            assert bool(chunks) == bool(item.text.strip()), item.uri
