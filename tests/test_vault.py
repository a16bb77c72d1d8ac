"""The built-in playbook pack (lore.vault) and its source (lore.sources.vault).

Every playbook is read through the real source, chunked with the real chunker, and
indexed in a real SQLite index, so the checks are on what an installed lore would serve.
"""

from __future__ import annotations

import re
import tomllib
import zipfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt

from lore import __version__
from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker, split_front_matter
from lore.errors import SourceError
from lore.models import SOURCE_TYPE_LABEL, Document, SearchMode, SourceFailure, Visibility, sha256_hex
from lore.protocols import KnowledgeSource
from lore.sources.filesystem import FilesystemSource
from lore.sources.vault import VAULT_URI_PREFIX, VaultSource, vault_source
from lore.sync import sync_sources
from lore.testing.embedders import CountingEmbedder
from lore.vault import RELEASED, playbooks_root

SECTIONS = ("Symptoms", "Checks", "Causes", "Fixes")
AREAS = {"network", "kubernetes", "linux", "postgresql", "mysql", "kafka", "redis"}


async def collect(source: KnowledgeSource) -> list[Document]:
    documents: list[Document] = []
    async for item in source.documents():
        assert isinstance(item, Document), item
        documents.append(item)
    return documents


@pytest.fixture(scope="module")
def playbooks() -> dict[str, str]:
    """relative path -> raw file text, straight from the package resources."""
    source = vault_source()
    root = playbooks_root()
    return {path: root.joinpath(*path.split("/")).read_text("utf-8") for path in source.list_files()}


@pytest.fixture
async def documents() -> list[Document]:
    return await collect(vault_source())


def headings(body: str, level: int) -> list[str]:
    tokens = MarkdownIt("commonmark").parse(body)
    return [
        tokens[i + 1].content
        for i, token in enumerate(tokens)
        if token.type == "heading_open" and token.tag == f"h{level}"
    ]


def fenced_blocks(body: str) -> list[str]:
    return [t.content for t in MarkdownIt("commonmark").parse(body) if t.type == "fence"]


# -- the pack's content ------------------------------------------------------------------


def test_the_pack_has_at_least_forty_playbooks_in_known_areas(playbooks: dict[str, str]) -> None:
    assert len(playbooks) >= 40
    for path in playbooks:
        area, name = path.split("/")
        assert area in AREAS, path
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*\.md", name), path
    assert {path.split("/")[0] for path in playbooks} == AREAS


def test_every_playbook_has_the_front_matter_fields(playbooks: dict[str, str]) -> None:
    for path, text in playbooks.items():
        assert text.startswith("---\n"), path
        metadata, body = split_front_matter(text)
        assert set(metadata) >= {"title", "tags", "alerts", "symptoms"}, path
        assert isinstance(metadata["title"], str), path
        assert metadata["title"].strip(), path
        for key in ("tags", "alerts", "symptoms"):
            values = metadata[key]
            assert isinstance(values, list), (path, key)
            assert values, (path, key)
            assert all(isinstance(v, str) and v.strip() for v in values), (path, key)
            # Lists become comma-joined labels: a comma inside one value would split it.
            assert all("," not in v for v in values), (path, key)
        for alert in metadata["alerts"]:
            assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", alert), (path, alert)
            # Front matter is not indexed text: an alert name must be findable in the body.
            assert alert in body, (path, alert)


def test_every_playbook_has_the_four_sections_in_order(playbooks: dict[str, str]) -> None:
    for path, text in playbooks.items():
        metadata, body = split_front_matter(text)
        assert headings(body, 1) == [metadata["title"]], path
        assert headings(body, 2) == list(SECTIONS), path


def test_every_playbook_gives_commands_and_says_what_their_output_means(playbooks: dict[str, str]) -> None:
    for path, text in playbooks.items():
        _, body = split_front_matter(text)
        checks = body.split("## Checks", 1)[1].split("## Causes", 1)[0]
        blocks = fenced_blocks(checks)
        assert blocks, f"{path}: no fenced command block under Checks"
        assert all(block.strip() for block in blocks), path
        prose = re.sub(r"```.*?```", "", checks, flags=re.DOTALL)
        # The reading of the output is the point: more explanation than bare commands.
        assert len(prose.split()) >= 80, f"{path}: Checks explain too little"


def test_no_real_hosts_addresses_or_secrets(playbooks: dict[str, str]) -> None:
    ipv4 = re.compile(r"(?<![\d.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![\d.])")
    # RFC 5737 documentation ranges, loopback, the unspecified address, netmasks.
    allowed_prefixes = ("192.0.2.", "198.51.100.", "203.0.113.", "127.", "0.0.0.0", "255.")
    # Kubernetes label and annotation prefixes look like domains but name no host.
    label_domains = ("kubernetes.io", "k8s.io")
    for path, text in playbooks.items():
        for match in ipv4.finditer(text):
            address = match.group(0)
            if all(int(part) <= 255 for part in match.groups()):
                assert address.startswith(allowed_prefixes), (path, address)
        for host in re.findall(r"\b(?:[a-z0-9-]+\.)+(?:com|net|org|io)\b(?!\.\w)", text):
            if host.endswith(label_domains):
                continue
            assert host == "example.com" or host.endswith(".example.com"), (path, host)
        assert not re.search(r"(?i)(password|secret|token)\s*[:=]\s*\S{8,}", text), path


# -- the source -----------------------------------------------------------------------------


async def test_the_source_yields_every_playbook_with_vault_provenance(
    documents: list[Document], playbooks: dict[str, str]
) -> None:
    source = vault_source()
    assert isinstance(source, KnowledgeSource)
    assert (source.name, source.source_type, source.visibility) == ("vault", "vault", Visibility.ALL_VIEWERS)
    assert source.incremental is False
    assert source.resume_token() is None
    assert [d.uri for d in documents] == [f"vault://lore/{path}" for path in sorted(playbooks)]
    for document in documents:
        path = document.uri.removeprefix(VAULT_URI_PREFIX)
        metadata, body = split_front_matter(playbooks[path])
        assert document.title == metadata["title"]
        assert document.text == body  # front matter removed, as for any runbook
        assert not document.text.startswith("---")
        assert document.media_type == "text/markdown"
        assert document.updated_at == RELEASED
        assert document.labels[SOURCE_TYPE_LABEL] == "vault"
        assert document.labels["folder"] == path.split("/")[0]
        assert document.labels["tags"] == ",".join(metadata["tags"])
        assert document.labels["alerts"] == ",".join(metadata["alerts"])


async def test_revision_is_the_content_hash_with_the_lore_version(
    documents: list[Document], playbooks: dict[str, str]
) -> None:
    for document in documents:
        data = playbooks[document.uri.removeprefix(VAULT_URI_PREFIX)].encode("utf-8")
        assert document.revision == f"{sha256_hex(data.decode('utf-8'))}+lore-{__version__}"
    assert len({d.revision for d in documents}) == len(documents)
    # The next release changes every revision, so sync rewrites (and re-dates) the pack...
    next_release = await collect(VaultSource(lore_version="99.0.0"))
    assert all(a.revision != b.revision for a, b in zip(documents, next_release, strict=True))
    # ...while the same release read twice is unchanged, so a second sync skips it all.
    again = await collect(vault_source())
    assert [d.revision for d in again] == [d.revision for d in documents]


async def test_a_playbooks_own_date_does_not_override_the_release_date(tmp_path: Path) -> None:
    (tmp_path / "linux").mkdir()
    (tmp_path / "linux" / "x.md").write_text("---\ntitle: X\nupdated: 2001-01-01\n---\n# X\n\ntext\n")
    (tmp_path / "linux" / "notes.txt").write_text("not a playbook")
    released = datetime(2030, 5, 4, tzinfo=UTC)
    [document] = await collect(VaultSource(tmp_path, released=released))
    assert document.uri == "vault://lore/linux/x.md"
    assert document.updated_at == released


async def test_an_unreadable_playbook_is_a_failure_and_a_missing_pack_an_error(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    (tmp_path / "redis" / "bad.md").write_bytes(b"# Bad\n\n\xff\xfe not utf-8\n")
    items = [item async for item in VaultSource(tmp_path).documents()]
    assert len(items) == 1
    assert isinstance(items[0], SourceFailure)
    assert items[0].uri == "vault://lore/redis/bad.md"
    assert "UTF-8" in items[0].reason
    with pytest.raises(SourceError, match="missing"):
        [item async for item in VaultSource(tmp_path / "absent").documents()]


async def test_the_pack_is_read_through_importlib_resources_even_from_a_zip(
    tmp_path: Path, documents: list[Document], playbooks: dict[str, str]
) -> None:
    # A zip import (zipapp, a zipped site-packages) has no directory on disk: the source
    # must list and read through the Traversable, never through a filesystem path.
    archive = tmp_path / "lore.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path, text in playbooks.items():
            zipped.writestr(f"lore/vault/playbooks/{path}", text)
    from_zip = await collect(VaultSource(zipfile.Path(archive, "lore/vault/playbooks/")))
    assert [(d.uri, d.revision, d.title, d.text) for d in from_zip] == [
        (d.uri, d.revision, d.title, d.text) for d in documents
    ]


def test_the_playbooks_are_declared_package_data(repo_root: Path) -> None:
    with (repo_root / "pyproject.toml").open("rb") as handle:
        package_data = tomllib.load(handle)["tool"]["setuptools"]["package-data"]["lore"]
    assert "vault/playbooks/**/*.md" in package_data


# -- chunking and retrieval ----------------------------------------------------------------


async def test_every_playbook_chunks_with_the_real_chunker(documents: list[Document]) -> None:
    chunker = Chunker.for_embedder(CountingEmbedder())
    for document in documents:
        chunks = chunker.chunk(document)
        assert len(chunks) >= 4, document.uri
        sections = {chunk.section.split(" › ")[0] for chunk in chunks}
        assert sections >= set(SECTIONS), (document.uri, sections)
        for chunk in chunks:
            assert chunk.text in document.text  # verbatim slices, quotable
            assert chunk.labels[SOURCE_TYPE_LABEL] == "vault"
            assert chunk.revision == document.revision
            assert chunk.updated_at == RELEASED


#: Alert-style questions, worded as a page or an alert description would put them (not
#: copied from the playbooks), with the playbook that should answer.
ALERT_QUERIES: Sequence[tuple[str, str]] = (
    ("KubePodCrashLooping: pod checkout/api-7d9 is restarting often, back-off restarting failed container",
     "kubernetes/pod-crashloopbackoff.md"),
    ("NodeFilesystemAlmostOutOfFiles: filesystem on /var has less than 3% inodes left",
     "linux/inodes-exhausted.md"),
    ("TLS certificate for api.example.com expires in 6 days, BlackboxSslCertificateWillExpireSoon",
     "network/tls-certificate-expiry.md"),
    ("PostgresqlReplicationLag: standby is 300 seconds behind the primary, replay lag growing",
     "postgresql/replication-lag.md"),
    ("consumer group billing has lag of 2 million messages on topic invoices and it keeps growing",
     "kafka/consumer-lag.md"),
    ("redis evicting keys, used_memory reached maxmemory, RedisOutOfConfiguredMaxmemory",
     "redis/memory-evictions.md"),
    ("nf_conntrack: table full, dropping packet on worker node",
     "network/conntrack-table-full.md"),
    ("Kernel OOM killer invoked on host, java process killed, HostOomKillDetected",
     "linux/memory-pressure-oom-killer.md"),
    ("Back-off pulling image registry.example.com/shop/api:1.43: manifest unknown",
     "kubernetes/image-pull-backoff.md"),
    ("KubeletDown: kubelet has disappeared from Prometheus target discovery",
     "kubernetes/kubelet-down.md"),
    ("MySQL replica Seconds_Behind_Source is 900 and rising",
     "mysql/replication-lag.md"),
    ("Redis ERR max number of clients reached on cache-01",
     "redis/too-many-clients.md"),
    ("Pod stuck Pending 0/8 nodes are available: Insufficient memory",
     "kubernetes/pod-pending-scheduling.md"),
    ("FATAL: sorry, too many clients already on orders database",
     "postgresql/too-many-connections.md"),
    ("Partitions under-replicated on broker 3 for 10 minutes",
     "kafka/under-replicated-partitions.md"),
    ("CPUThrottlingHigh: 60% throttling of CPU in namespace shop for container api",
     "kubernetes/cpu-throttling.md"),
    ("Clock on node is 3 seconds off NTP, NodeClockSkewDetected",
     "linux/clock-skew-ntp.md"),
    ("Too many open files errors in nginx error log",
     "linux/file-descriptor-exhaustion.md"),
    ("ingress returning 502 Bad Gateway for checkout, 5xx rate above 5%",
     "network/http-5xx-spike.md"),
    ("Node worker-7 has been unready for more than 15 minutes",
     "kubernetes/node-not-ready.md"),
    ("HPA payments-api has been running at max replicas for 15 minutes",
     "kubernetes/hpa-not-scaling.md"),
    ("deadlock detected, queries waiting on locks behind an ALTER TABLE",
     "postgresql/long-transactions-locks.md"),
    ("Redis commands slow, PING latency 40ms, slowlog full of KEYS",
     "redis/latency.md"),
    ("Kafka broker 2 log directory offline, disk full",
     "kafka/broker-disk.md"),
    ("defunct processes accumulating on build agent",
     "linux/zombie-processes.md"),
    ("journal files are using 4G under /var/log/journal",
     "linux/journald-disk-usage.md"),
)


async def test_alert_style_queries_find_their_playbook_in_the_top_three_by_bm25(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    index = SqliteBackend(tmp_path / "lore.db", embedder)
    try:
        report = await sync_sources([vault_source()], index, embedder, Chunker.for_embedder(embedder))
        assert report.ok
        assert report.added >= 40
        misses = []
        for query, expected in ALERT_QUERIES:
            passages = (await index.retrieve(query, top_k=10, mode=SearchMode.BM25)).passages
            ranked = list(dict.fromkeys(p.uri for p in passages))[:3]
            if VAULT_URI_PREFIX + expected not in ranked:
                misses.append((query, expected, ranked))
        assert not misses, misses
        # Filterable by the label sync and the source set.
        labels = {SOURCE_TYPE_LABEL: "vault"}
        vault_only = (await index.retrieve("disk full", top_k=3, labels=labels)).passages
        assert vault_only
        assert all(p.uri.startswith(VAULT_URI_PREFIX) for p in vault_only)
        # A second sync of the same release writes nothing.
        again = await sync_sources([vault_source()], index, embedder, Chunker.for_embedder(embedder))
        assert again.unchanged == report.added
        assert again.chunks_embedded == 0
    finally:
        index.close()


def test_front_matter_is_plain_yaml(playbooks: dict[str, str]) -> None:
    # The front matter must parse with a strict safe loader too, not only through
    # python-frontmatter, so other tools (linters, site generators) can read it.
    for path, text in playbooks.items():
        raw = text.split("---\n", 2)[1]
        assert isinstance(yaml.safe_load(raw), dict), path




async def test_a_user_sources_sync_never_prunes_or_rewrites_the_pack(tmp_path: Path) -> None:
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "disk-full.md").write_text("# Disk full\n\nOur own steps for a full disk.\n")
    (runbooks / "old.md").write_text("# Old\n\nRetired page.\n")
    user = FilesystemSource("runbooks", runbooks, visibility=Visibility.ALL_VIEWERS)
    embedder = CountingEmbedder()
    chunker = Chunker.for_embedder(embedder)
    index = SqliteBackend(tmp_path / "lore.db", embedder)
    try:
        first = await sync_sources([vault_source(), user], index, embedder, chunker)
        pack = dict(index.held("vault"))
        assert len(pack) == first.added - 2
        (runbooks / "old.md").unlink()
        # The user source alone, and then beside the pack: only its own page goes.
        alone = await sync_sources([user], index, embedder, chunker)
        assert (alone.deleted, alone.unchanged) == (1, 1)
        both = await sync_sources([vault_source(), user], index, embedder, chunker)
        assert (both.deleted, both.unchanged, both.chunks_embedded) == (0, len(pack) + 1, 0)
        assert dict(index.held("vault")) == pack
    finally:
        index.close()

#: Questions in plain words with no identifier of the playbook in them: only the vector
#: channel of the real model can bridge the vocabulary.
PARAPHRASED_QUERIES: Sequence[tuple[str, str]] = (
    ("the website's security certificate is about to run out", "network/tls-certificate-expiry.md"),
    ("pods keep dying right after they start and kubernetes waits longer each time",
     "kubernetes/pod-crashloopbackoff.md"),
    ("cannot create new files although there is plenty of free space on the volume",
     "linux/inodes-exhausted.md"),
    ("the read replica of our postgres database is falling behind", "postgresql/replication-lag.md"),
    ("messages pile up in the queue faster than the workers handle them", "kafka/consumer-lag.md"),
    ("the cache is throwing away keys because it ran out of room", "redis/memory-evictions.md"),
    ("services on one machine cannot look up hostnames", "network/dns-resolution-failures.md"),
    ("the kernel killed our biggest process because the machine ran out of RAM",
     "linux/memory-pressure-oom-killer.md"),
    ("new version of the service never finishes deploying", "kubernetes/deployment-rollout-stuck.md"),
    ("the server time differs from the other machines by several seconds", "linux/clock-skew-ntp.md"),
)


@pytest.mark.slow
async def test_paraphrased_questions_find_their_playbook_with_the_real_model(tmp_path: Path) -> None:
    from lore.config import LoreSettings
    from lore.embedders.local import from_settings

    embedder = from_settings(LoreSettings(embedder="local"))
    index = SqliteBackend(tmp_path / "lore.db", embedder)
    try:
        report = await sync_sources([vault_source()], index, embedder, Chunker.for_embedder(embedder))
        assert report.ok
        misses = []
        for query, expected in PARAPHRASED_QUERIES:
            passages = (await index.retrieve(query, top_k=10, mode=SearchMode.HYBRID)).passages
            ranked = list(dict.fromkeys(p.uri for p in passages))[:3]
            if VAULT_URI_PREFIX + expected not in ranked:
                misses.append((query, expected, ranked))
        assert not misses, misses
    finally:
        index.close()
