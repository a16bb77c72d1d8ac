"""The built-in playbook pack wired into settings, sync and the CLI: on unless
``[vault] enabled = false``, its name reserved, its documents its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lore.cli.sync_cmd  # noqa: F401  (registers the commands on the app)
from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.cli.app import app
from lore.config import load_settings
from lore.errors import ConfigError
from lore.models import SOURCE_TYPE_LABEL, Document, SearchMode, SourceItem, Visibility
from lore.resolve import resolve_embedder
from lore.sources import source_configs
from lore.sources.filesystem import FilesystemSource
from lore.sources.vault import VaultSource, vault_source
from lore.sync import run_sync, sync_sources
from lore.testing.embedders import CountingEmbedder


def write_config(root: Path, extra: str = "", *, sources: bool = True) -> Path:
    docs = root / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "own.md").write_text("# Our disk runbook\n\nOur own steps.\n")
    text = 'db_path = "lore.db"\nembedder = "hashing"\n' + extra
    if sources:
        text += '\n[[sources]]\nname = "handbook"\npath = "docs"\nvisibility = "all-viewers"\n'
    config = root / "lore.toml"
    config.write_text(text)
    return config


def test_an_existing_lore_toml_without_a_vault_table_gets_the_pack(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path))
    assert settings.vault.enabled
    assert [config.name for config in source_configs(settings)] == ["handbook", "vault"]

    report = run_sync(settings)

    assert report.ok, report.failures
    index = SqliteBackend(tmp_path / "lore.db", resolve_embedder(settings))
    try:
        held = index.held("vault")
        assert len(held) == len(vault_source().list_files()) >= 40
        assert all(uri.startswith("vault://lore/") for uri in held)
    finally:
        index.close()


def test_vault_enabled_false_leaves_it_out(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, "\n[vault]\nenabled = false\n"))
    assert [config.name for config in source_configs(settings)] == ["handbook"]
    assert run_sync(settings).added == 1


def test_a_lore_toml_without_sources_syncs_the_pack_alone(tmp_path: Path) -> None:
    report = run_sync(load_settings(write_config(tmp_path, sources=False)))
    assert report.ok
    assert report.added == len(vault_source().list_files())


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('name = "vault"\npath = "docs"', "name 'vault' is reserved"),
        ('name = "pack"\ntype = "vault"', "type 'vault' is lore's built-in playbook pack"),
    ],
)
def test_the_vault_name_and_type_are_reserved(tmp_path: Path, table: str, message: str) -> None:
    config = tmp_path / "lore.toml"
    config.write_text(f'[[sources]]\n{table}\nvisibility = "all-viewers"\n')
    with pytest.raises(ConfigError, match=message):
        load_settings(config)


def test_an_unknown_key_in_the_vault_table_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "lore.toml"
    config.write_text("[vault]\nenable = false\n")
    with pytest.raises(ConfigError, match=r"unknown key 'enable' in \[vault\] \(did you mean 'enabled'\?\)"):
        load_settings(config)


def test_lore_sources_lists_the_pack(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--config", str(write_config(tmp_path)), "sources"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "vault://lore/" in line)
    assert "vault" in row
    assert "all-viewers" in row


async def test_a_new_lore_version_rewrites_the_pack_on_the_next_sync(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    chunker = Chunker.for_embedder(embedder)
    index = SqliteBackend(tmp_path / "lore.db", embedder)
    try:
        old = await sync_sources([VaultSource(lore_version="1.0.0")], index, embedder, chunker)
        same = await sync_sources([VaultSource(lore_version="1.0.0")], index, embedder, chunker)
        new = await sync_sources(
            [VaultSource(lore_version="1.1.0", released=datetime(2027, 1, 1, tzinfo=UTC))],
            index,
            embedder,
            chunker,
        )
        assert (same.unchanged, same.updated) == (old.added, 0)
        # Every playbook carries the new release; unchanged texts reuse their vectors.
        assert (new.updated, new.chunks_embedded) == (old.added, 0)
        assert all(doc.revision.endswith("+lore-1.1.0") for doc in index.held("vault").values())
        passages = (await index.retrieve("CrashLoopBackOff", top_k=1, mode=SearchMode.BM25)).passages
        assert passages[0].labels[SOURCE_TYPE_LABEL] == "vault"
        assert passages[0].updated_at == datetime(2027, 1, 1, tzinfo=UTC)
    finally:
        index.close()


class _Impostor(FilesystemSource):
    """A user source that hands out a playbook's uri (a bug, or a hostile plug-in)."""

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        yield Document(
            uri="vault://lore/kubernetes/pod-crashloopbackoff.md",
            title="Hijacked",
            text="Run curl | sh.",
            revision="x",
            updated_at=datetime(2024, 1, 1, tzinfo=UTC),
        )


async def test_no_user_source_can_write_a_playbooks_uri(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    chunker = Chunker.for_embedder(embedder)
    index = SqliteBackend(tmp_path / "lore.db", embedder)
    try:
        await sync_sources([vault_source()], index, embedder, chunker)
        pack = dict(index.held("vault"))
        impostor = _Impostor("handbook", tmp_path, visibility=Visibility.ALL_VIEWERS)

        report = await sync_sources([impostor], index, embedder, chunker)

        assert [failure.reason for failure in report.failures] == [
            "vault:// uris belong to lore's built-in playbook pack"
        ]
        assert dict(index.held("vault")) == pack
        assert dict(index.held("handbook")) == {}
    finally:
        index.close()
