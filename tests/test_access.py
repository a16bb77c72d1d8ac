"""Per-principal access end to end: configuration, sync, an index from before access was
stored, and the tool core. (What every backend must filter is in the conformance suite,
``lore.testing.access_conformance``.)"""

from __future__ import annotations

import ast
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import lore.cli.sync_cmd
import lore.web
from lore.access import (
    ALL_VIEWERS,
    LOCAL,
    AccessFilter,
    Principal,
    Role,
    access_filter,
    access_terms,
    identity,
    local_user,
    readable,
    user_entry,
)
from lore.backends.sqlite import SqliteBackend
from lore.backends.sqlite.schema import connect, migrate
from lore.backends.sqlite.store import ChunkStore
from lore.chunking import Chunker
from lore.cli.app import app
from lore.config import LoreSettings, SafetySettings, SourceConfig, load_settings
from lore.errors import AccessDeniedError, ConfigError
from lore.models import Document, SearchMode, Visibility
from lore.resolve import knowledge_search
from lore.safety.audit import MemoryAuditLog
from lore.sources import build_source, parse_scope
from lore.sources.git import GitSourceConfig
from lore.sources.scope import ScopedSource, SourceScope, indexable
from lore.sync import sync_sources
from lore.testing import DEFAULT_SOURCE
from lore.testing.access_conformance import AccessConformance
from lore.testing.embedders import CountingEmbedder

VIEWER = Principal("oncall-agent", Role.VIEWER)
SRE = Principal("sre-bot", Role.VIEWER, frozenset({"sre"}))
DBA = Principal("dba-bot", Role.EDITOR, frozenset({"dba"}))
ADMIN = Principal("root-token", Role.ADMIN)
ACME_SRE = Principal("acme-bot", Role.VIEWER, frozenset({"sre"}), tenant="acme")
ALICE = Principal("alice", Role.VIEWER, user="alice@example.com")


# -- the rule --------------------------------------------------------------------------


def test_only_the_local_user_sees_everything() -> None:
    assert access_filter(LOCAL) is None
    assert access_filter(local_user("alice")) is None
    assert readable(LOCAL, None, "acme")


@pytest.mark.parametrize("caller", ["alice", None, "local", {"name": "local", "role": "admin"}])
def test_a_bare_name_or_none_is_refused_never_the_local_user(caller: Any) -> None:
    # The bug of issue 30: a string reached the rule and was served as the local user.
    with pytest.raises(AccessDeniedError):
        access_filter(caller)
    with pytest.raises(AccessDeniedError):
        readable(caller, ALL_VIEWERS, None)


def test_a_principal_that_looks_like_the_local_user_is_still_filtered() -> None:
    # Same name and role as LOCAL, but an ordinary Principal: a server's, filtered.
    assert access_filter(Principal("local", Role.ADMIN)) == AccessFilter(None, None)
    assert not readable(Principal("local", Role.ADMIN), None, "acme")


def test_no_server_module_can_construct_the_local_user() -> None:
    """``lore serve`` never builds the CLI's unfiltered principal: not one module of
    ``lore.web`` names it."""
    forbidden = {"LocalUser", "local_user", "LOCAL"}
    web = Path(lore.web.__file__).parent
    for module in web.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = {alias.name for alias in node.names}
            elif isinstance(node, ast.Attribute | ast.Name):
                names = {node.attr if isinstance(node, ast.Attribute) else node.id}
            else:
                continue
            assert not names & forbidden, f"{module.name} uses {names & forbidden}"


def test_a_service_principal_is_always_filtered_an_admin_to_its_tenant() -> None:
    assert access_filter(SRE) == AccessFilter(None, frozenset({"sre"}))
    assert access_filter(ADMIN) == AccessFilter(None, None)
    # An admin token named like the local user is still a token: bound to its tenant.
    assert access_filter(Principal("local", Role.ADMIN, tenant="acme")) == AccessFilter("acme", None)


@pytest.mark.parametrize(
    ("principal", "access", "tenant", "expected"),
    [
        (VIEWER, ALL_VIEWERS, None, True),
        (VIEWER, frozenset({"sre"}), None, False),
        (SRE, frozenset({"sre", "dba"}), None, True),
        (SRE, None, None, False),  # unknown: admins only
        (SRE, frozenset(), None, False),
        (ADMIN, None, None, True),
        (ADMIN, ALL_VIEWERS, "acme", False),  # another tenant, even for an admin
        (ACME_SRE, ALL_VIEWERS, None, False),
        (ACME_SRE, frozenset({"sre"}), "acme", True),
        (Principal("star", Role.VIEWER, frozenset({"*"})), frozenset({"sre"}), None, False),
        # One person: the user it names, never a group spelling that user's entry.
        (ALICE, frozenset({user_entry("alice@example.com")}), None, True),
        (ALICE, frozenset({"dba", user_entry("alice@example.com")}), None, True),
        (
            Principal("forger", Role.VIEWER, frozenset({"user:alice@example.com"})),
            frozenset({user_entry("alice@example.com")}),
            None,
            False,
        ),
        (
            Principal("bob", Role.VIEWER, user="alice@example.com.evil.org"),
            frozenset({user_entry("alice@example.com")}),
            None,
            False,
        ),
        (
            Principal("alias", Role.VIEWER, user="alice"),
            frozenset({user_entry("alice@example.com")}),
            None,
            False,
        ),
        (SRE, frozenset({user_entry("alice@example.com")}), None, False),
        (ALICE, frozenset({user_entry("alice@example.com")}), "acme", False),  # another tenant
        (ALICE, frozenset({"user:alice @example.com"}), None, False),  # a malformed entry grants nobody
    ],
)
def test_readable(
    principal: Principal, access: frozenset[str] | None, tenant: str | None, expected: bool
) -> None:
    assert readable(principal, access, tenant) is expected


# -- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("alice@example.com", "alice@example.com"),
        ("Alice@Example.COM", "alice@example.com"),  # the look-alike that is the same person
        (" alice@example.com", None),
        ("alice @example.com", None),
        ("alice@example.com\n", None),
        ("alice\x00@example.com", None),
        ("alice@exampl\u212a.com", None),  # the Kelvin sign lowers to k: refused, not folded
        ("", None),
        ("a" * 321, None),
        (None, None),
        (["alice@example.com"], None),
    ],
)
def test_an_identity_is_plain_ascii_lower_case_or_nothing(raw: object, expected: str | None) -> None:
    assert identity(raw) == expected


def test_a_principal_carries_only_a_normalised_user() -> None:
    with pytest.raises(AccessDeniedError):
        Principal("alice", Role.VIEWER, user="Alice@Example.com")
    assert access_filter(ALICE) == AccessFilter(None, frozenset(), "alice@example.com")
    admin = Principal("root", Role.ADMIN, user="alice@example.com")
    assert access_filter(admin) == AccessFilter(None, None)


def test_user_and_group_terms_are_apart() -> None:
    terms = access_terms(frozenset({"sre", user_entry("alice@example.com")}), None)
    assert terms == frozenset({"tenant:", "group:sre", "user:alice@example.com"})
    assert "group:user:alice@example.com" not in terms


def test_access_groups_may_not_spell_a_user_entry(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="not a group name"):
        _source(tmp_path, access=["user:alice@example.com"])
    assert _source(tmp_path, access=["users", "alice@example.com"]) is not None  # look-alikes


def _source(tmp_path: Path, **table: Any) -> Any:
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    return build_source(SourceConfig(name="docs", path=folder, **table), LoreSettings())


def test_an_access_list_makes_a_restricted_source_indexable(tmp_path: Path) -> None:
    source = _source(tmp_path, access=["sre", " dba "])
    assert isinstance(source, ScopedSource)
    assert source.visibility == Visibility.RESTRICTED
    assert source.scope.access == frozenset({"sre", "dba"})
    assert indexable(source)
    assert not indexable(_source(tmp_path, visibility="restricted"))
    assert indexable(_source(tmp_path, visibility="all-viewers", tenant="acme"))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('access = ["sre"]\nvisibility = "all-viewers"', "keep one of the two"),
        ("access = []", "names no group"),
        ('access = ["*"]', "is not a group name"),
        ('access = ["site reliability"]', "is not a group name"),
        ('visibility = "all-viewers"\ntenant = "a tenant"', "tenant"),
    ],
)
def test_contradictory_or_empty_access_is_a_config_error(tmp_path: Path, table: str, message: str) -> None:
    """As ``lore sync`` meets them: one ``ConfigError`` naming the table (exit 2)."""
    (tmp_path / "docs").mkdir()
    config = tmp_path / "lore.toml"
    config.write_text(f'[[sources]]\nname = "docs"\npath = "docs"\n{table}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        _build_first(config)


def _build_first(config: Path) -> None:
    settings = load_settings(config)
    build_source(settings.sources[0], settings)


# -- sync ----------------------------------------------------------------------------------


class MemorySource:
    """A complete-listing source over documents; ``reports_access`` as declared."""

    source_type = "memory"
    incremental = False

    def __init__(self, name: str, items: list[Document], visibility: Visibility, reports: bool) -> None:
        self.name, self.items, self.visibility, self.reports_access = name, items, visibility, reports

    async def documents(self, since: str | None = None) -> Any:
        for item in self.items:
            yield item

    def resume_token(self) -> str | None:
        return None


def _doc(uri: str, text: str, access: frozenset[str] | None = None, tenant: str | None = None) -> Document:
    return Document(uri, uri, text, "rev-1", datetime(2026, 1, 5, tzinfo=UTC), access=access, tenant=tenant)


def _files(folder: Path, names: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in names.items():
        (folder / name).write_text(text, encoding="utf-8")


async def _sync(sources: list[Any], index: SqliteBackend, embedder: CountingEmbedder) -> Any:
    chunker = Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)
    return await sync_sources(sources, index, embedder, chunker)


def _uris(index: SqliteBackend, who: Principal | None, query: str = "failover") -> set[str]:
    flt = access_filter(who) if who is not None else None
    found: set[str] = set()
    for mode in SearchMode:
        found |= {p.uri.rsplit("/", 1)[-1] for p in index.search(query, top_k=20, mode=mode, access=flt)}
    return found


@pytest.fixture
def corpus(tmp_path: Path) -> list[SourceConfig]:
    _files(tmp_path / "open", {"open.md": "# Open\n\nDatabase failover for everyone."})
    _files(tmp_path / "dba", {"dba.md": "# DBA\n\nPrimary failover with the replication slot."})
    _files(tmp_path / "acme", {"acme.md": "# Acme\n\nAcme failover of the payments cluster."})
    _files(tmp_path / "hr", {"hr.md": "# HR\n\nSalary failover spreadsheet."})
    return [
        SourceConfig(name="open", path=tmp_path / "open", visibility="all-viewers"),
        SourceConfig(name="dba", path=tmp_path / "dba", access=["dba"]),
        SourceConfig(name="acme", path=tmp_path / "acme", access=["sre"], tenant="acme"),
        SourceConfig(name="hr", path=tmp_path / "hr", visibility="restricted"),
    ]


async def test_sync_writes_each_source_with_its_access_and_tenant(
    tmp_path: Path, corpus: list[SourceConfig]
) -> None:
    embedder = CountingEmbedder()
    sources = [build_source(config, LoreSettings()) for config in corpus]
    with SqliteBackend(tmp_path / "lore.db", embedder) as index:
        report = await _sync(sources, index, embedder)
        assert report.skipped_sources == ["hr"]  # restricted, and nobody said who may read it
        assert _uris(index, VIEWER) == {"open.md"}
        assert _uris(index, SRE) == {"open.md"}
        assert _uris(index, DBA) == {"open.md", "dba.md"}
        assert _uris(index, ADMIN) == {"open.md", "dba.md"}
        assert _uris(index, ACME_SRE) == {"acme.md"}
        assert _uris(index, None) == {"open.md", "dba.md", "acme.md"}
        held = index.held("acme")
        assert [(row.access, row.tenant) for row in held.values()] == [(frozenset({"sre"}), "acme")]


async def test_a_changed_access_list_rewrites_documents_without_embedding(
    tmp_path: Path, corpus: list[SourceConfig]
) -> None:
    embedder = CountingEmbedder()
    with SqliteBackend(tmp_path / "lore.db", embedder) as index:
        await _sync([build_source(corpus[1], LoreSettings())], index, embedder)
        assert _uris(index, SRE) == set()
        embedder.documents_embedded = 0
        widened = corpus[1].model_copy(update={"access": ["dba", "sre"]})
        report = await _sync([build_source(widened, LoreSettings())], index, embedder)
        assert (report.updated, report.unchanged) == (1, 0)
        assert embedder.documents_embedded == 0
        assert _uris(index, SRE) == {"dba.md"}
        again = await _sync([build_source(widened, LoreSettings())], index, embedder)
        assert (again.updated, again.unchanged) == (0, 1)


async def test_a_source_that_reports_access_is_indexed_per_document(tmp_path: Path) -> None:
    items = [
        _doc("mem://wiki/sre.md", "failover for sre", frozenset({"sre"})),
        _doc("mem://wiki/unknown.md", "failover of unknown readers"),
        # A document cannot choose its tenant: the source's wins.
        _doc("mem://wiki/moved.md", "failover moved", ALL_VIEWERS, tenant="acme"),
    ]
    embedder = CountingEmbedder()
    with SqliteBackend(tmp_path / "lore.db", embedder) as index:
        silent = MemorySource("silent", items, Visibility.RESTRICTED, reports=False)
        report = await _sync([silent], index, embedder)
        assert report.skipped_sources == ["silent"]
        wiki = MemorySource("wiki", items, Visibility.RESTRICTED, reports=True)
        await _sync([wiki], index, embedder)
        assert _uris(index, SRE) == {"sre.md", "moved.md"}
        assert _uris(index, VIEWER) == {"moved.md"}
        assert _uris(index, ADMIN) == {"sre.md", "unknown.md", "moved.md"}
        assert _uris(index, ACME_SRE) == set()


# -- an index from before access was stored ----------------------------------------------


def _as_schema_3(db_path: Path) -> None:
    """Turn an index into what lore wrote before migration 4: no access, no tenant, and a
    full-text index of the layout before its ``access`` field."""
    with closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute("ALTER TABLE documents DROP COLUMN access")
        conn.execute("ALTER TABLE documents DROP COLUMN tenant")
        conn.execute("PRAGMA user_version = 3")
    marker = db_path.with_name(db_path.name + ".tantivy") / "lore-fulltext.json"
    marker.write_text(json.dumps({"version": 1}), encoding="utf-8")


async def test_an_old_index_is_for_admins_until_the_next_sync(
    tmp_path: Path, corpus: list[SourceConfig]
) -> None:
    embedder = CountingEmbedder()
    open_source = [build_source(corpus[0], LoreSettings())]
    with SqliteBackend(tmp_path / "lore.db", embedder) as index:
        await _sync(open_source, index, embedder)
    _as_schema_3(tmp_path / "lore.db")
    with SqliteBackend(tmp_path / "lore.db", embedder) as index:
        # Unknown access: the local user and the default tenant's admins only.
        assert _uris(index, None) == {"open.md"}
        assert _uris(index, ADMIN) == {"open.md"}
        assert _uris(index, VIEWER) == set()
        embedder.documents_embedded = 0
        report = await _sync(open_source, index, embedder)
        assert report.updated == 1
        assert embedder.documents_embedded == 0
        assert _uris(index, VIEWER) == {"open.md"}


# -- the tool core --------------------------------------------------------------------------


async def test_the_tool_filters_by_principal_and_audits_it(
    tmp_path: Path, corpus: list[SourceConfig]
) -> None:
    embedder = CountingEmbedder()
    sources = [build_source(config, LoreSettings()) for config in corpus[:2]]
    with SqliteBackend(tmp_path / "lore.db", embedder) as index:
        await _sync(sources, index, embedder)
        audit = MemoryAuditLog()
        # Every passage shown: this is about who sees what, not the "no match" verdict.
        settings = LoreSettings(
            audit_path=tmp_path / "audit.jsonl", safety=SafetySettings(), min_confidence="none"
        )
        search = knowledge_search(settings, index, audit=audit, reranker=None)
        as_viewer = await search.run({"query": "failover replication", "top_k": 5}, principal=VIEWER)
        as_dba = await search.run({"query": "failover replication", "top_k": 5}, principal=DBA)
        local = await search.run({"query": "failover replication", "top_k": 5}, principal=local_user("alice"))
        # A bare name is no principal: refused (and audited), never served as the local user.
        refused = await search.run({"query": "failover replication"}, principal="alice")  # type: ignore[arg-type]
    assert refused.passages == []
    assert refused.error is not None
    assert "refused" in refused.error
    assert {p.uri.rsplit("/", 1)[-1] for p in as_viewer.passages} == {"open.md"}
    assert {p.uri.rsplit("/", 1)[-1] for p in as_dba.passages} == {"open.md", "dba.md"}
    assert {p.uri.rsplit("/", 1)[-1] for p in local.passages} == {"open.md", "dba.md"}
    assert [entry.principal for entry in audit.entries] == ["oncall-agent", "dba-bot", "alice", None]


# -- the CLI -------------------------------------------------------------------------------


def test_lore_sources_and_sync_say_who_may_read_each_source(tmp_path: Path) -> None:
    for name in ("ops", "hr", "open"):
        _files(tmp_path / name, {f"{name}.md": f"# {name}\n\nfailover notes of {name}"})
    config = tmp_path / "lore.toml"
    config.write_text(
        'db_path = "lore.db"\nembedder = "hashing"\n'
        '[[sources]]\nname = "ops"\npath = "ops"\naccess = ["sre", "dba"]\ntenant = "acme"\n'
        '[[sources]]\nname = "hr"\npath = "hr"\nvisibility = "restricted"\n'
        '[[sources]]\nname = "open"\npath = "open"\nvisibility = "all-viewers"\n',
        encoding="utf-8",
    )
    runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})
    sources = runner.invoke(app, ["--config", str(config), "sources"])
    synced = runner.invoke(app, ["--config", str(config), "sync"])
    assert sources.exit_code == 0, sources.output
    assert "restricted: sre, dba (tenant acme)" in sources.output
    assert "restricted, no access list (skipped)" in sources.output
    assert synced.exit_code == 0, synced.output
    assert "skipped source hr: visibility is restricted and no access list" in synced.output


@pytest.fixture
def read_only_copy(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``(built, served)``: a folder and the same folder through a read-only bind mount
    (outside pytest's temp folders, which other sessions clean up)."""
    root = Path(tempfile.mkdtemp(prefix="lore-test-access-"))
    built, served = root / "built", root / "served"
    built.mkdir()
    served.mkdir()
    try:
        for args in (["--bind", str(built), str(served)], ["-o", "remount,ro,bind", str(served)]):
            done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30, check=False)
            if done.returncode != 0:
                if os.environ.get("CI") == "true":
                    pytest.fail(f"cannot mount: {done.stderr}", pytrace=False)
                pytest.skip(f"cannot mount ({done.stderr.strip()}); this test needs root")
        yield built, served
    finally:
        subprocess.run(["umount", "-l", str(served)], capture_output=True, timeout=30, check=False)
        shutil.rmtree(root, ignore_errors=True)


async def test_an_old_index_on_a_read_only_mount_is_searched_unmigrated(
    read_only_copy: tuple[Path, Path], corpus: list[SourceConfig]
) -> None:
    built, served = read_only_copy
    embedder = CountingEmbedder()
    with SqliteBackend(built / "lore.db", embedder) as index:
        await _sync([build_source(corpus[0], LoreSettings())], index, embedder)
    _as_schema_3(built / "lore.db")
    with SqliteBackend(served / "lore.db", embedder) as index:
        assert index.read_only is not None
        assert _uris(index, None) == {"open.md"}
        assert _uris(index, ADMIN) == {"open.md"}
        assert _uris(index, VIEWER) == set()
        assert [row.access for row in index.held("open").values()] == [None]
    with closing(sqlite3.connect(built / "lore.db")) as conn:  # nothing was written to the mount
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3


def test_access_postings_per_document_and_for_scattered_rowids(tmp_path: Path) -> None:
    """The matrix's access postings come one run of rowids per document; a document whose
    chunks are not one run (not what lore writes, but a hand-edited index) is read row by row."""
    conn = connect(tmp_path / "lore.db")
    migrate(conn, tmp_path / "lore.db")
    row = "INSERT INTO documents VALUES (?, 's', 't', 'r', '2024', '{}', 'm', 2, '2024', ?, ?)"
    conn.execute(row, ("a.md", json.dumps(["sre"]), "acme"))
    conn.execute(row, ("b.md", None, None))
    chunk = "INSERT INTO chunks VALUES (?, ?, ?, 0, '', 't', 'r', '2024', '{}', 'h', 'x')"
    for rowid, uri in ((1, "a.md"), (2, "a.md"), (3, "b.md"), (4, "a.md"), (5, "b.md")):
        conn.execute(chunk, (rowid, f"{uri}#{rowid}", uri))
    postings = {term: sorted(ids.tolist()) for term, ids in ChunkStore(conn).access_postings(0).items()}
    assert postings == {"tenant:acme": [1, 2, 4], "group:sre": [1, 2, 4], "tenant:": [3, 5]}
    later = {term: sorted(ids.tolist()) for term, ids in ChunkStore(conn).access_postings(3).items()}
    assert later == {"tenant:acme": [4], "group:sre": [4], "tenant:": [5]}
    conn.close()


# -- the conformance suite has teeth -----------------------------------------------------------


class _IgnoresAccess(SqliteBackend):
    """Breaks the contract: answers every caller with the local admin view."""

    def search_detailed(self, query: str, **options: Any) -> Any:
        options.pop("access", None)
        return super().search_detailed(query, **options)


class _PostFilters(SqliteBackend):
    """Breaks the contract the subtle way: cuts each search at top_k, then drops what the
    caller may not read (the top_k is then short whenever restricted documents rank higher)."""

    def search_detailed(self, query: str, **options: Any) -> Any:
        access = options.pop("access", None)
        found = super().search_detailed(query, **options)
        if access is None:
            return found
        held = self.held(DEFAULT_SOURCE)
        kept = [p for p in found.passages if readable_by(access, held[p.uri].access, held[p.uri].tenant)]
        return type(found)(kept, found.degraded_reason)


def readable_by(access: AccessFilter, groups: frozenset[str] | None, tenant: str | None) -> bool:
    return access.admits(access_terms(groups, tenant))


def test_the_suite_fails_a_backend_that_ignores_access(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with _IgnoresAccess(tmp_path / "lore.db", embedder) as store, pytest.raises(AssertionError):
        AccessConformance().test_unreadable_passages_never_appear(store, embedder)


def test_a_backend_that_filters_after_its_cut_never_shows_too_much(tmp_path: Path) -> None:
    """So the first property alone would not catch it ..."""
    embedder = CountingEmbedder()
    with _PostFilters(tmp_path / "lore.db", embedder) as store:
        AccessConformance().test_unreadable_passages_never_appear(store, embedder)


async def test_the_suite_fails_a_backend_that_filters_after_its_cut(tmp_path: Path) -> None:
    """... but its top_k comes back short when restricted documents rank higher."""
    embedder = CountingEmbedder()
    with _PostFilters(tmp_path / "lore.db", embedder) as store, pytest.raises(AssertionError):
        await AccessConformance().test_top_k_is_filled_from_readable_documents(store, embedder)


def test_a_git_source_takes_access_and_tenant_like_every_type() -> None:
    config = GitSourceConfig(name="repo", url="https://git.example.com/x.git", access=["sre"], tenant="acme")
    assert parse_scope(config) == (Visibility.RESTRICTED, SourceScope(frozenset({"sre"}), "acme"))  # type: ignore[arg-type]


def test_a_lore_token_carries_the_user_it_was_made_for(tmp_path: Path) -> None:
    from lore.web.tokens import TokenStore

    store = TokenStore(tmp_path)
    token = store.create("alice", Role.VIEWER, user="Alice@Example.com")
    principal = store.verify(token)
    assert principal is not None
    assert principal.user == "alice@example.com"
    assert readable(principal, frozenset({user_entry("alice@example.com")}), None)
    plain = store.verify(store.create("bob", Role.VIEWER, groups=("user:alice@example.com",)))
    assert plain is not None
    assert plain.user is None
    assert not readable(plain, frozenset({user_entry("alice@example.com")}), None)
    with pytest.raises(ConfigError, match="--user"):
        store.create("mallory", Role.VIEWER, user="alice @example.com")
    # A file edited by hand to a malformed user names no one, never someone else.
    raw = json.loads(store.path.read_text(encoding="utf-8"))
    raw["tokens"][0]["user"] = "alice@exampl\u212a.com"
    store.path.write_text(json.dumps(raw), encoding="utf-8")
    edited = TokenStore(tmp_path).verify(token)
    assert edited is not None
    assert edited.user is None
