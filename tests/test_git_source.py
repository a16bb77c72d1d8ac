"""The git source against real repositories served by real git servers on 127.0.0.1:
``git http-backend`` behind a token check, and OpenSSH's sshd with generated keys."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from git_servers import SmartHttpServer, SshServer, Upstream, git, keygen, start_sshd
from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.config import SourceConfig
from lore.errors import ConfigError, SourceError
from lore.models import Document, SourceFailure, SourceItem, Tombstone, Visibility
from lore.protocols import KnowledgeSource
from lore.sources import parse_visibility, typed_source_config
from lore.sources.git import GitSource, GitSourceConfig, git_source
from lore.sources.git_repo import FETCHED_REF
from lore.sources.git_transport import git_error, parse_remote_url
from lore.sync import resume_token_key, sync_sources
from lore.testing.embedders import CountingEmbedder

FIRST = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
SECOND = datetime(2024, 2, 3, 4, 5, 6, tzinfo=UTC)
THIRD = datetime(2024, 3, 4, 5, 6, 7, tzinfo=UTC)
TOKEN_ENV = "LORE_TEST_GIT_TOKEN"


def fake_token() -> str:
    """Built at run time and obviously fake, so no secret scanner flags the repository."""
    return "glpat-" + "TESTONLY" + "x" * 12


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    repo = Upstream(tmp_path / "upstream")
    front_matter = "---\ntitle: Disk full\ntags: [storage]\nupdated: 2020-01-15\n---\n"
    repo.write("disk-full.md", front_matter + "\n# Ignored\n\nRun df -h.\n")
    repo.write("alerts/etcd.md", "# etcd has no leader\n\nRestart the member.\n")
    repo.write("alerts/kafka.md", "# Kafka lag\n\nScale the consumers.\n")
    repo.write("old-name.md", "# Renamed runbook\n\nSame text after the rename.\n")
    repo.write("drafts/wip.md", "# Not ready\n")
    repo.write("notes.txt", "plain notes\n")
    repo.write("logo.png", b"\x89PNG\x00\x00")
    repo.commit("first", FIRST)
    repo.write("alerts/etcd.md", "# etcd has no leader\n\nRestart the member, then check quorum.\n")
    repo.commit("second", SECOND)
    repo.push()
    return repo


@pytest.fixture
def http_server(upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmartHttpServer]:
    monkeypatch.setenv(TOKEN_ENV, fake_token())
    server = SmartHttpServer(upstream.bare.parent, token=fake_token()).start()
    yield server
    server.stop()


def config(url: str, **overrides: object) -> GitSourceConfig:
    options: dict[str, object] = {
        "name": "runbooks",
        "url": url,
        "visibility": "all-viewers",
        "exclude": ["drafts/"],
        "allow_private_hosts": True,  # the test servers are on 127.0.0.1
    } | overrides
    return GitSourceConfig.model_validate(options)


def http_source(server: SmartHttpServer, data_dir: Path, **overrides: object) -> GitSource:
    return git_source(config(server.url(), token_env=TOKEN_ENV, **overrides), data_dir)


async def listing(source: GitSource, since: str | None = None) -> dict[str, SourceItem]:
    return {item.uri: item async for item in source.documents(since=since)}


def documents(items: dict[str, SourceItem]) -> dict[str, Document]:
    return {uri: item for uri, item in items.items() if isinstance(item, Document)}


def tombstones(items: dict[str, SourceItem]) -> set[str]:
    return {uri for uri, item in items.items() if isinstance(item, Tombstone)}


# -- complete listing over smart HTTP with a token ---------------------------------------


async def test_complete_listing_over_http_with_a_token(
    http_server: SmartHttpServer, upstream: Upstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    source = http_source(http_server, tmp_path / "data")
    assert isinstance(source, KnowledgeSource)

    items = await listing(source)

    assert set(items) == {
        "git://runbooks@disk-full.md",
        "git://runbooks@alerts/etcd.md",
        "git://runbooks@alerts/kafka.md",
        "git://runbooks@old-name.md",
        "git://runbooks@notes.txt",
    }  # drafts/ excluded; logo.png matches no include glob
    docs = documents(items)
    disk = docs["git://runbooks@disk-full.md"]
    assert disk.title == "Disk full"
    assert disk.labels["tags"] == "storage"
    assert disk.text.startswith("# Ignored")  # front matter removed, as in the filesystem source
    assert disk.revision == upstream.blob("disk-full.md")  # the blob id
    assert disk.updated_at == FIRST  # its last commit: not the clone time, nor front matter
    etcd = docs["git://runbooks@alerts/etcd.md"]
    assert etcd.updated_at == SECOND
    assert etcd.labels["folder"] == "alerts"
    assert docs["git://runbooks@notes.txt"].media_type == "text/plain"
    assert source.resume_token() == git("rev-parse", "HEAD", cwd=upstream.work)

    # The token went to the server, and nowhere else.
    token = fake_token()
    assert any(headers.get("Authorization", "").startswith("Basic ") for _, headers in http_server.requests)
    for path in source.repo_dir.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    assert token not in (source.repo_dir / "config").read_text()
    assert token not in caplog.text

    # A partial clone: the excluded draft's blob was never downloaded.
    missing = git("rev-list", "--objects", "--missing=print", "--no-walk", FETCHED_REF, cwd=source.repo_dir)
    assert f"?{upstream.blob('drafts/wip.md')}" in missing.split()


async def test_the_users_own_git_config_is_ignored(
    http_server: SmartHttpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # An insteadOf that would send lore elsewhere, and a credential store that would keep the token.
    (home / ".gitconfig").write_text(
        f'[url "http://127.0.0.1:1/"]\n\tinsteadOf = {http_server.url("")}\n[credential]\n\thelper = store\n'
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "not-a-repo"))  # inherited GIT_* variables are dropped
    assert len(documents(await listing(http_source(http_server, tmp_path / "data")))) == 5
    assert not (home / ".git-credentials").exists()


def test_a_token_is_not_configured_for_plain_http_to_a_public_host(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="https:// only"):
        git_source(
            config("http://git.example.com/runbooks.git", allow_private_hosts=False, token_env=TOKEN_ENV),
            tmp_path,
        )


async def test_wrong_or_missing_token_is_refused_without_prompting_or_leaking(
    http_server: SmartHttpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "glpat-" + "WRONG" + "y" * 12
    monkeypatch.setenv(TOKEN_ENV, wrong)
    with pytest.raises(SourceError, match="fetching") as refused:
        await listing(http_source(http_server, tmp_path / "a"))
    assert wrong not in str(refused.value)

    with pytest.raises(SourceError, match="fetching"):
        await listing(git_source(config(http_server.url()), tmp_path / "b"))  # no token at all

    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(ConfigError, match=TOKEN_ENV):
        await listing(http_source(http_server, tmp_path / "c"))


def test_git_errors_are_scrubbed_of_the_token() -> None:
    token = fake_token()
    stderr = f"fatal: header Authorization: Bearer {token} refused\n".encode()
    assert token not in git_error(stderr, (token,))
    assert "***" in git_error(stderr, (token,))


async def test_token_file_is_read_at_fetch_time(http_server: SmartHttpServer, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(fake_token() + "\n")
    source = git_source(config(http_server.url(), token_file=token_file), tmp_path / "data")
    assert len(documents(await listing(source))) == 5


# -- incremental listings ---------------------------------------------------------------


async def test_incremental_listing_yields_exactly_the_changes(
    http_server: SmartHttpServer, upstream: Upstream, tmp_path: Path
) -> None:
    source = http_source(http_server, tmp_path / "data")
    await listing(source)
    token = source.resume_token()
    assert token is not None

    upstream.write("alerts/kafka.md", "# Kafka lag\n\nScale the consumers; check the partition count.\n")
    upstream.write("alerts/redis.md", "# Redis memory\n\nEvict keys.\n")
    (upstream.work / "notes.txt").unlink()
    git("mv", "old-name.md", "new-name.md", cwd=upstream.work)
    upstream.write("drafts/wip2.md", "# Still not ready\n")
    head = upstream.commit("third", THIRD)
    upstream.push()

    items = await listing(source, since=token)

    assert set(documents(items)) == {
        "git://runbooks@alerts/kafka.md",
        "git://runbooks@alerts/redis.md",
        "git://runbooks@new-name.md",
    }
    assert tombstones(items) == {"git://runbooks@notes.txt", "git://runbooks@old-name.md"}
    assert all(doc.updated_at == THIRD for doc in documents(items).values())
    assert source.resume_token() == head

    nothing = await listing(source, since=head)
    assert nothing == {}


async def test_force_push_falls_back_to_a_complete_listing(
    http_server: SmartHttpServer, upstream: Upstream, tmp_path: Path
) -> None:
    source = http_source(http_server, tmp_path / "data")
    await listing(source)
    token = source.resume_token()
    assert token is not None

    # Rewrite history: the second commit is replaced by one that also deletes kafka.md.
    git("reset", "--quiet", "--hard", "HEAD~1", cwd=upstream.work)
    (upstream.work / "alerts" / "kafka.md").unlink()
    upstream.write("alerts/etcd.md", "# etcd has no leader\n\nA rewritten fix.\n")
    head = upstream.commit("rewritten", THIRD)
    upstream.push(force=True)
    git("reflog", "expire", "--expire=now", "--all", cwd=upstream.bare)
    git("gc", "--quiet", "--prune=now", cwd=upstream.bare)  # the old head is gone upstream

    items = await listing(source, since=token)

    assert set(documents(items)) == {
        "git://runbooks@disk-full.md",
        "git://runbooks@alerts/etcd.md",
        "git://runbooks@old-name.md",
        "git://runbooks@notes.txt",
    }  # complete, unchanged files included
    assert tombstones(items) == set()  # sync prunes after a listing declared complete
    assert source.listing_was_complete()
    assert source.resume_token() == head


async def test_sync_prunes_after_a_force_push_and_only_then(
    http_server: SmartHttpServer, upstream: Upstream, tmp_path: Path
) -> None:
    """The listing after a force-push is complete and says so; sync then prunes what it
    lacks. Before the seam (``CompleteListing``), sync pruned nothing after an incremental
    source and the deleted runbook stayed searchable forever."""
    embedder = CountingEmbedder()
    index = SqliteBackend(tmp_path / "lore.db", embedder)
    chunker = Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)
    try:
        source = http_source(http_server, tmp_path / "data")
        assert (await sync_sources([source], index, embedder, chunker)).ok
        git("reset", "--quiet", "--hard", "HEAD~1", cwd=upstream.work)
        (upstream.work / "alerts" / "kafka.md").unlink()
        upstream.commit("rewritten", THIRD)
        upstream.push(force=True)

        report = await sync_sources([source], index, embedder, chunker)

        assert report.ok, report.failures
        assert report.deleted == 1
        assert "git://runbooks@alerts/kafka.md" not in index.held("runbooks")
        assert len(index.held("runbooks")) == 4
        assert index.get_state(resume_token_key("runbooks")) == source.resume_token()

        # An incremental listing of nothing prunes nothing.
        again = await sync_sources([source], index, embedder, chunker)
        assert (again.deleted, again.seen, len(index.held("runbooks"))) == (0, 0, 4)
        assert not source.listing_was_complete()
    finally:
        index.close()


async def test_a_force_push_that_empties_the_branch_meets_the_mass_delete_guard(
    http_server: SmartHttpServer, upstream: Upstream, tmp_path: Path
) -> None:
    embedder = CountingEmbedder()
    index = SqliteBackend(tmp_path / "lore.db", embedder)
    chunker = Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)
    try:
        source = http_source(http_server, tmp_path / "data")
        assert (await sync_sources([source], index, embedder, chunker)).ok
        git("checkout", "--quiet", "--orphan", "rewritten", cwd=upstream.work)
        git("rm", "-r", "--quiet", "--cached", ".", cwd=upstream.work)
        for path in list(upstream.work.rglob("*.md")) + list(upstream.work.glob("*.txt")):
            if path.name != "disk-full.md":
                path.unlink()
        upstream.commit("only one page left", THIRD)
        git("push", "--quiet", "--force", "origin", "rewritten:main", cwd=upstream.work)

        report = await sync_sources([source], index, embedder, chunker)

        assert [(refused.missing, refused.indexed) for refused in report.refused_prunes] == [(4, 5)]
        assert len(index.held("runbooks")) == 5
        # The token stays: `lore sync --allow-mass-delete` lists everything again and prunes.
        allowed = await sync_sources([source], index, embedder, chunker, allow_mass_delete=True)
        assert allowed.deleted == 4
        assert set(index.held("runbooks")) == {"git://runbooks@disk-full.md"}
    finally:
        index.close()


async def test_a_new_clone_resumes_from_a_token_in_its_history(
    http_server: SmartHttpServer, upstream: Upstream, tmp_path: Path
) -> None:
    """The index may outlive the clone (a fresh container): the token is found in the
    history the new clone fetched, and the listing stays incremental."""
    first = http_source(http_server, tmp_path / "first")
    await listing(first)
    token = first.resume_token()
    upstream.write("alerts/redis.md", "# Redis memory\n\nEvict keys.\n")
    upstream.commit("third", THIRD)
    upstream.push()

    items = await listing(http_source(http_server, tmp_path / "second"), since=token)

    assert set(items) == {"git://runbooks@alerts/redis.md"}


async def test_unknown_token_falls_back_to_a_complete_listing(
    http_server: SmartHttpServer, tmp_path: Path
) -> None:
    source = http_source(http_server, tmp_path / "data")
    items = await listing(source, since="0" * 40)
    assert len(documents(items)) == 5
    assert tombstones(items) == set()
    assert source.listing_was_complete()


# -- failures ---------------------------------------------------------------------------


async def test_failed_fetch_keeps_the_previous_commit_and_index_and_reports_it(
    http_server: SmartHttpServer, upstream: Upstream, tmp_path: Path
) -> None:
    embedder = CountingEmbedder()
    index = SqliteBackend(tmp_path / "lore.db", embedder)
    chunker = Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)
    try:
        source = http_source(http_server, tmp_path / "data")
        first = await sync_sources([source], index, embedder, chunker)
        assert first.ok, first.failures
        held = dict(index.held("runbooks"))
        token = index.get_state(resume_token_key("runbooks"))
        fetched = git("rev-parse", FETCHED_REF, cwd=source.repo_dir)
        assert token == fetched

        upstream.write("alerts/redis.md", "# Redis memory\n\nEvict keys.\n")
        upstream.commit("third", THIRD)
        upstream.push()
        http_server.stop()

        second = await sync_sources([source], index, embedder, chunker)

        assert not second.ok
        assert "listing failed" in second.failures[0].reason
        assert "fetching" in second.failures[0].reason
        assert dict(index.held("runbooks")) == held
        assert index.get_state(resume_token_key("runbooks")) == token
        assert git("rev-parse", FETCHED_REF, cwd=source.repo_dir) == fetched
        assert source.resume_token() is None
    finally:
        index.close()


async def test_a_file_added_only_in_a_merge_is_dated_by_the_head_commit(
    upstream: Upstream, tmp_path: Path
) -> None:
    git("checkout", "--quiet", "-b", "side", cwd=upstream.work)
    upstream.write("side.md", "# Side\n")
    upstream.commit("side", SECOND)
    git("checkout", "--quiet", "main", cwd=upstream.work)
    git("merge", "--quiet", "--no-ff", "--no-commit", "side", cwd=upstream.work)
    upstream.write("merge-only.md", "# Written while resolving the merge\n")
    upstream.commit("merge", THIRD)
    upstream.push()
    server = SmartHttpServer(upstream.bare.parent, token=None).start()
    try:
        docs = documents(await listing(git_source(config(server.url()), tmp_path / "data")))
    finally:
        server.stop()
    assert docs["git://runbooks@merge-only.md"].updated_at == THIRD
    assert docs["git://runbooks@side.md"].updated_at == SECOND
    assert docs["git://runbooks@disk-full.md"].updated_at == FIRST


async def test_unreadable_files_are_reported_per_file(upstream: Upstream, tmp_path: Path) -> None:
    upstream.write("binary.txt", b"abc\x00def")
    upstream.write("latin1.md", "caf\xe9\n".encode("latin-1"))
    upstream.write("big.md", "# Big\n\n" + "x" * 200)
    (upstream.work / "link.md").symlink_to("disk-full.md")
    upstream.commit("odd files", THIRD)
    upstream.push()
    server = SmartHttpServer(upstream.bare.parent, token=None).start()
    try:
        source = git_source(config(server.url(), max_file_bytes=150), tmp_path / "data")
        items = await listing(source)
    finally:
        server.stop()
    reasons = {uri: item.reason for uri, item in items.items() if isinstance(item, SourceFailure)}
    assert "NUL" in reasons["git://runbooks@binary.txt"]
    assert "UTF-8" in reasons["git://runbooks@latin1.md"]
    assert "over this source's max_file_bytes (150)" in reasons["git://runbooks@big.md"]
    assert "symbolic link" in reasons["git://runbooks@link.md"]
    assert isinstance(items["git://runbooks@disk-full.md"], Document)


async def test_html_and_broken_pdfs_go_through_the_extraction_layer(
    upstream: Upstream, tmp_path: Path
) -> None:
    upstream.write(
        "vendor/advisory.html",
        b"<html><head><title>CoreDNS advisory</title></head><body><h1>CoreDNS</h1>"
        b"<h2>Mitigation</h2><p>Raise the cache TTL.</p></body></html>",
    )
    upstream.write("vendor/scan.pdf", b"%PDF-1.4 not really a PDF")
    upstream.commit("vendor files", THIRD)
    upstream.push()
    server = SmartHttpServer(upstream.bare.parent, token=None).start()
    try:
        items = await listing(git_source(config(server.url()), tmp_path / "data"))
    finally:
        server.stop()
    html = items["git://runbooks@vendor/advisory.html"]
    assert isinstance(html, Document)
    assert html.title == "CoreDNS advisory"
    assert "## Mitigation" in html.text
    assert "<h2>" not in html.text
    assert html.media_type == "text/html"
    assert html.revision.endswith("+extract-1")
    pdf = items["git://runbooks@vendor/scan.pdf"]
    assert isinstance(pdf, SourceFailure)
    assert "PDF" in pdf.reason


async def test_sub_path_and_branch(upstream: Upstream, tmp_path: Path) -> None:
    git("checkout", "--quiet", "-b", "docs", cwd=upstream.work)
    upstream.write("alerts/only-on-branch.md", "# Branch only\n")
    upstream.commit("branch", THIRD)
    git("push", "--quiet", "origin", "docs", cwd=upstream.work)
    server = SmartHttpServer(upstream.bare.parent, token=None).start()
    try:
        source = git_source(config(server.url(), branch="docs", path="alerts/"), tmp_path / "data")
        items = await listing(source)
    finally:
        server.stop()
    assert set(items) == {
        "git://runbooks@alerts/etcd.md",
        "git://runbooks@alerts/kafka.md",
        "git://runbooks@alerts/only-on-branch.md",
    }
    assert "folder" not in documents(items)["git://runbooks@alerts/etcd.md"].labels  # relative to path


# -- ssh --------------------------------------------------------------------------------


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    server = start_sshd(tmp_path / "sshd")
    yield server
    server.stop()


async def test_listing_over_ssh_with_lore_known_hosts(
    sshd: SshServer, upstream: Upstream, tmp_path: Path
) -> None:
    keys = tmp_path / "lore keys"  # a space: ssh splits option values at spaces unless quoted
    keys.mkdir()
    known_hosts = keys / "known hosts"
    known_hosts.write_text(sshd.known_hosts_line())
    key = Path(shutil.copy(sshd.client_key, keys / "deploy key"))
    source = git_source(
        config(sshd.url(upstream.bare), ssh_key_file=key, known_hosts_file=known_hosts), tmp_path / "data"
    )
    items = await listing(source)
    assert len(documents(items)) == 5
    assert documents(items)["git://runbooks@alerts/etcd.md"].updated_at == SECOND


async def test_protocol_v0_server_that_refuses_partial_fetches_gets_a_full_fetch(
    upstream: Upstream, tmp_path: Path
) -> None:
    server = start_sshd(tmp_path / "sshd-v0", protocol_v2=False)
    try:
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(server.known_hosts_line())
        source = git_source(
            config(server.url(upstream.bare), ssh_key_file=server.client_key, known_hosts_file=known_hosts),
            tmp_path / "data",
        )
        assert len(documents(await listing(source))) == 5
        upstream.write("alerts/redis.md", "# Redis memory\n\nEvict keys.\n")
        upstream.commit("third", THIRD)
        upstream.push()
        token = source.resume_token()
        assert set(documents(await listing(source, since=token))) == {"git://runbooks@alerts/redis.md"}
    finally:
        server.stop()


async def test_ssh_refuses_a_wrong_or_unknown_host_key(
    sshd: SshServer, upstream: Upstream, tmp_path: Path
) -> None:
    other = keygen(tmp_path / "impostor_key")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(sshd.known_hosts_line(other))
    source = git_source(
        config(sshd.url(upstream.bare), ssh_key_file=sshd.client_key, known_hosts_file=known_hosts),
        tmp_path / "a",
    )
    with pytest.raises(SourceError, match=r"(?i)host key"):
        await listing(source)

    # Default known-hosts file is lore's own, empty: strict checking refuses the host.
    unknown = git_source(config(sshd.url(upstream.bare), ssh_key_file=sshd.client_key), tmp_path / "b")
    with pytest.raises(SourceError, match=r"(?i)host key verification failed"):
        await listing(unknown)

    # Without strict checking the key is accepted on first contact and recorded there.
    trusting = git_source(
        config(sshd.url(upstream.bare), ssh_key_file=sshd.client_key, strict_host_key_checking=False),
        tmp_path / "c",
    )
    assert len(documents(await listing(trusting))) == 5
    assert sshd.host_public_key.split()[1] in (tmp_path / "c" / "git" / "known_hosts").read_text()


# -- URL validation and config ------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ext::sh -c touch% /tmp/pwned", "whitespace"),
        ("ext::sh", "transport"),
        ("fd::3", "transport"),
        ("file:///srv/git/runbooks.git", "scheme file://"),
        ("/srv/git/runbooks.git", "local paths"),
        ("--upload-pack=touch /tmp/pwned", "whitespace"),
        ("--upload-pack=evil", "option"),
        ("ssh://-oProxyCommand=evil/x", "host"),
        ("-oProxyCommand=evil:x", "option"),
        ("host:-x", "option"),
        ("https://user:secret@example.com/repo.git", "credentials"),
        ("https://127.0.0.1/repo.git", "loopback"),
        ("http://localhost:8080/repo.git", "loopback"),
        ("https://[::1]/repo.git", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("git@169.254.1.1:org/repo.git", "link-local"),
        ("ssh://git@0.0.0.0/repo.git", "loopback"),
    ],
)
def test_dangerous_urls_are_refused_before_git_runs(url: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=why):
        git_source(config(url, allow_private_hosts=False), tmp_path)
    assert not (tmp_path / "git").exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.com/org/runbooks.git",
        "git@git.example.com:org/runbooks.git",
        "ssh://git@git.example.com:2222/org/runbooks.git",
        "git://git.example.com/runbooks.git",
    ],
)
def test_remote_urls_are_accepted(url: str) -> None:
    assert parse_remote_url(url, allow_private_hosts=False).url == url


def test_private_hosts_are_allowed_only_when_the_source_says_so() -> None:
    assert parse_remote_url("http://127.0.0.1:9/x.git", allow_private_hosts=True).host == "127.0.0.1"


def test_config_model_refuses_unknown_fields_with_one_config_error() -> None:
    url = "https://git.example.com/x.git"
    with pytest.raises(ConfigError, match=r"brnch.*runbooks.*did you mean .branch."):
        typed_source_config({"name": "runbooks", "type": "git", "url": url, "brnch": "main"})
    with pytest.raises(ConfigError, match="branch"):
        typed_source_config(
            {"name": "runbooks", "type": "git", "url": "https://git.example.com/x.git", "branch": "--force"}
        )
    parsed = typed_source_config({"name": "runbooks", "type": "git", "url": url, "visibility": "All-Viewers"})
    assert isinstance(parsed, GitSourceConfig)
    assert parse_visibility(parsed) is Visibility.ALL_VIEWERS
    assert parsed.path == ""
    # What a generic [[sources]] table parsed as lore.config.SourceConfig dumps.
    generic = SourceConfig.model_validate(
        {"name": "runbooks", "type": "git", "url": "https://git.example.com/x.git", "path": "docs/"}
    )
    typed = typed_source_config(generic)
    assert isinstance(typed, GitSourceConfig)
    assert typed.path == "docs"
    with pytest.raises(ConfigError, match="inside the repository"):
        typed_source_config({"name": "runbooks", "type": "git", "url": url, "path": "../etc"})
    with pytest.raises(ConfigError, match="name"):
        typed_source_config({"name": "..", "type": "git", "url": "https://git.example.com/x.git"})
    assert parsed.strict_host_key_checking is True
    assert parsed.allow_private_hosts is False
