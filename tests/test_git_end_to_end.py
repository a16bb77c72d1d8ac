"""A git repository served over smart HTTP on 127.0.0.1, end to end through lore's own
entry points: ``lore sync`` (a real subprocess for the safety checks, the in-process CLI
with the counting test embedder for the counts), an upstream edit re-synced
incrementally, and searches filtered on ``source_type`` through ``lore search --json``
and the MCP server."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mcp import Client
from mcp.types import CallToolResult
from typer.testing import CliRunner

import lore.cli.search_cmd
import lore.cli.sync_cmd  # noqa: F401
from git_servers import SmartHttpServer, Upstream, git, start_sshd
from lore.access import LOCAL
from lore.cli.app import app
from lore.config import LoreSettings, load_settings
from lore.mcp_server import build_server
from lore.resolve import EMBEDDERS, build_knowledge_search
from lore.sources import build_source
from lore.sources.git import GitSource
from lore.testing.embedders import CountingEmbedder
from lore.tool.core import TOOL_NAME

LORE = Path(sys.executable).with_name("lore")
TOKEN_ENV = "LORE_TEST_GIT_TOKEN"
FIRST = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
SECOND = datetime(2024, 2, 3, 4, 5, 6, tzinfo=UTC)

#: One embedder for every command of a test, so its counters see the whole run.
SHARED = CountingEmbedder(dimension=384)


def from_settings(settings: LoreSettings) -> CountingEmbedder:
    """Registry hook for ``embedder = "counting"`` (see the ``counting`` fixture)."""
    return SHARED


def fake_token() -> str:
    """Built at run time and obviously fake, so no secret scanner flags the repository."""
    return "glpat-" + "TESTONLY" + "e2e" + "x" * 9


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    repo = Upstream(tmp_path / "upstream")
    for number in range(6):
        repo.write(f"alerts/alert-{number}.md", f"# Alert {number}\n\nCheck service{number} first.\n")
    repo.write("etcd.md", "# etcd has no leader\n\nRestart the quorumzebra member.\n")
    repo.commit("first", FIRST)
    repo.push()
    return repo


@pytest.fixture
def server(upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmartHttpServer]:
    monkeypatch.setenv(TOKEN_ENV, fake_token())
    http = SmartHttpServer(upstream.bare.parent, token=fake_token()).start()
    yield http
    http.stop()


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingEmbedder:
    monkeypatch.setitem(EMBEDDERS, "counting", __name__)
    SHARED.reset()
    return SHARED


def write_config(root: Path, url: str, embedder: str, extra: str = "") -> Path:
    config = root / "lore.toml"
    config.write_text(
        f'db_path = "lore.db"\nembedder = "{embedder}"\naudit_path = "audit.jsonl"\n\n'
        f'[[sources]]\nname = "runbooks"\ntype = "git"\nurl = "{url}"\nvisibility = "all-viewers"\n'
        f'token_env = "{TOKEN_ENV}"\nallow_private_hosts = true\n{extra}'
    )
    return config


def run_lore(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    env.update({TOKEN_ENV: fake_token(), "COLUMNS": "200", "NO_COLOR": "1"})
    return subprocess.run([str(LORE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


async def mcp_search(config: Path, labels: dict[str, str]) -> CallToolResult:
    """The in-process MCP server (the same object ``lore mcp`` serves) through the SDK's client."""
    search = build_knowledge_search(load_settings(config))
    async with Client(build_server(search, principal=LOCAL)) as client:
        return await client.call_tool(TOOL_NAME, {"query": "quorumzebra raft", "top_k": 3, "labels": labels})


def test_lore_sync_of_a_git_source_keeps_the_token_out_of_everything(
    server: SmartHttpServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path, server.url(), "hashing", "\n[vault]\nenabled = false\n")

    done = run_lore("--config", str(config), "sync", cwd=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    clone = tmp_path / "lore.db.data" / "git" / "runbooks"  # the default data folder
    assert (clone / "HEAD").is_file()
    token = fake_token()
    assert token not in done.stdout + done.stderr
    for path in [*clone.rglob("*"), tmp_path / "audit.jsonl"]:
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    assert "remote.origin.url=" + server.url() in git("config", "--list", cwd=clone)
    # It went over the wire, in a header, never in the URL.
    assert all(token not in path for path, _ in server.requests)
    listed = run_lore("--config", str(config), "sources", cwd=tmp_path)
    assert server.url() in listed.stdout


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ext::sh", "transport"),
        ("file:///srv/runbooks.git", "file://"),
        ("--upload-pack=evil", "option"),
    ],
)
def test_lore_sync_refuses_a_dangerous_url_in_one_line_with_exit_2(
    tmp_path: Path, url: str, message: str
) -> None:
    config = write_config(tmp_path, url, "hashing")
    done = run_lore("--config", str(config), "sync", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "runbooks" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "lore.db").exists()
    assert not (tmp_path / "lore.db.data").exists()


def test_lore_sync_refuses_a_loopback_host_unless_the_source_allows_it(
    server: SmartHttpServer, tmp_path: Path
) -> None:
    config = tmp_path / "lore.toml"
    config.write_text(
        f'db_path = "lore.db"\nembedder = "hashing"\n[[sources]]\nname = "runbooks"\ntype = "git"\n'
        f'url = "{server.url()}"\nvisibility = "all-viewers"\n'
    )
    done = run_lore("--config", str(config), "sync", cwd=tmp_path)
    assert done.returncode == 2
    assert "allow_private_hosts" in done.stderr
    assert server.requests == []
    assert not (tmp_path / "lore.db").exists()


def test_a_failed_fetch_through_lore_sync_keeps_the_index_and_says_so(
    server: SmartHttpServer, upstream: Upstream, tmp_path: Path
) -> None:
    config = write_config(tmp_path, server.url(), "hashing", "\n[vault]\nenabled = false\n")
    assert run_lore("--config", str(config), "sync", cwd=tmp_path).returncode == 0
    (upstream.work / "etcd.md").unlink()
    upstream.commit("second", SECOND)
    upstream.push()
    server.stop()

    done = run_lore("--config", str(config), "sync", cwd=tmp_path)

    assert done.returncode == 1
    assert "listing failed, nothing pruned" in done.stdout
    assert fake_token() not in done.stdout + done.stderr
    found = run_lore(
        "--config", str(config), "search", "quorumzebra", "--json", "--mode", "bm25", cwd=tmp_path
    )
    assert "git://runbooks@etcd.md" in found.stdout


def test_sync_edit_resync_and_search_by_source_type_through_the_cli_and_mcp(
    server: SmartHttpServer, upstream: Upstream, tmp_path: Path, counting: CountingEmbedder
) -> None:
    config = write_config(tmp_path, server.url(), "counting")
    runner = CliRunner()

    first = runner.invoke(app, ["--config", str(config), "sync"])
    assert first.exit_code == 0, first.output
    playbooks_and_runbooks = counting.documents_embedded
    assert playbooks_and_runbooks > 7

    upstream.write("etcd.md", "# etcd has no leader\n\nRestart the quorumzebra member, then check raft.\n")
    upstream.commit("second", SECOND)
    upstream.push()
    counting.reset()
    second = runner.invoke(app, ["--config", str(config), "sync"])

    assert second.exit_code == 0, second.output
    # Only the edited runbook is listed and re-chunked: one new chunk text embedded.
    assert counting.documents_embedded == 1
    assert "updated" in second.output

    only_git = runner.invoke(
        app, ["--config", str(config), "search", "restart member", "--json", "--label", "source_type=git"]
    )
    assert only_git.exit_code == 0, only_git.output
    passages = json.loads(only_git.output)["passages"]
    assert passages
    assert all(passage["uri"].startswith("git://runbooks@") for passage in passages)
    assert passages[0]["uri"] == "git://runbooks@etcd.md"
    assert passages[0]["updated_at"].startswith("2024-02-03")  # the commit, not the sync
    only_vault = runner.invoke(
        app, ["--config", str(config), "search", "restart member", "--json", "--label", "source_type=vault"]
    )
    vault_passages = json.loads(only_vault.output)["passages"]
    assert vault_passages
    assert all(passage["uri"].startswith("vault://lore/") for passage in vault_passages)

    result = asyncio.run(mcp_search(config, {"source_type": "git"}))
    assert not result.is_error
    assert result.structured_content is not None
    found = result.structured_content["passages"]
    assert found[0]["uri"] == "git://runbooks@etcd.md"
    assert all(passage["uri"].startswith("git://runbooks@") for passage in found)


def test_clone_key_and_known_hosts_paths_are_relative_to_lore_toml(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    config = tmp_path / "lore.toml"
    table = (
        '[[sources]]\nname = "runbooks"\ntype = "git"\nurl = "git@git.example.com:sre/runbooks.git"\n'
        'visibility = "all-viewers"\nssh_key_file = "keys/deploy"\nknown_hosts_file = "keys/known_hosts"\n'
    )
    config.write_text('db_path = "state/lore.db"\n' + table)
    settings = load_settings(config)
    source = build_source(settings.sources[0], settings)
    assert isinstance(source, GitSource)
    assert source.repo_dir == tmp_path / "state" / "lore.db.data" / "git" / "runbooks"
    assert source.known_hosts_file == tmp_path / "keys" / "known_hosts"
    assert source.config.ssh_key_file == tmp_path / "keys" / "deploy"
    assert source.config.strict_host_key_checking is True

    config.write_text('db_path = "state/lore.db"\ndata_dir = "/var/lib/lore"\n' + table)
    settings = load_settings(config)
    moved = build_source(settings.sources[0], settings)
    assert isinstance(moved, GitSource)
    assert moved.repo_dir == Path("/var/lib/lore/git/runbooks")


def test_lore_sync_over_ssh_checks_the_host_key_against_lores_own_file(
    upstream: Upstream, tmp_path: Path
) -> None:
    """Strict host-key checking by default: an unknown server is refused (exit 1, the
    index untouched), then accepted once its key is in lore's known-hosts file, which
    lore.toml names relative to itself. The user's ~/.ssh plays no part."""
    sshd = start_sshd(tmp_path / "sshd")
    try:
        (tmp_path / "keys").mkdir()
        shutil.copy(sshd.client_key, tmp_path / "keys" / "deploy")
        known_hosts = tmp_path / "keys" / "known_hosts"
        known_hosts.write_text("")
        config = tmp_path / "lore.toml"
        config.write_text(
            'db_path = "lore.db"\nembedder = "hashing"\n[vault]\nenabled = false\n\n'
            f'[[sources]]\nname = "runbooks"\ntype = "git"\nurl = "{sshd.url(upstream.bare)}"\n'
            'visibility = "all-viewers"\nallow_private_hosts = true\n'
            'ssh_key_file = "keys/deploy"\nknown_hosts_file = "keys/known_hosts"\n'
        )

        refused = run_lore("--config", str(config), "sync", cwd=tmp_path)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "host key verification failed" in refused.stdout.lower()
        assert str(known_hosts) in refused.stdout.replace("\n", "")
        assert known_hosts.read_text() == ""  # nothing was accepted on first contact

        known_hosts.write_text(sshd.known_hosts_line())
        accepted = run_lore("--config", str(config), "sync", cwd=tmp_path)
        assert accepted.returncode == 0, accepted.stdout + accepted.stderr
        found = run_lore("--config", str(config), "search", "quorumzebra", "--json", cwd=tmp_path)
        assert json.loads(found.stdout)["passages"][0]["uri"] == "git://runbooks@etcd.md"
    finally:
        sshd.stop()
