"""Synthetic chunks at scale: runbook-like texts and random unit vectors.

Texts mix common operations words with the identifiers SRE text is full of (alert names
such as ``EtcdNoLeader``, services such as ``payments-consumer-group``, metric names,
error codes, pod states), each drawn from a Zipf-like distribution, so BM25 meets both
long posting lists (common words) and selective ones (rare identifiers), as in real
runbooks. Vectors (dimension 384, like all-MiniLM-L6-v2) are clustered as real
embeddings are: each is a topic direction, plus its document's direction, plus noise, so
a chunk's nearest neighbours are its own document's chunks and then its topic's, and a
query is a perturbed chunk. An exact scan's cost depends only on the count and size of
the vectors; an approximate index's recall depends on this structure (uniform random
vectors in 384 dimensions have no near neighbours at all, unlike any text embedding).

Everything is derived from one seed; a smaller scale is a prefix of a larger one, so
every scale and every engine sees the same chunks. ``save``/``load`` pass a corpus to the
worker processes that measure one engine each.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

from lore.models import SOURCE_LABEL, SOURCE_TYPE_LABEL, Chunk, Document, make_chunk_id, sha256_hex

DIMENSION = 384
CHUNKS_PER_DOCUMENT = 8
SECTIONS = ("Meaning", "Impact", "Diagnosis", "Mitigation")
#: Share of a chunk's tokens that are identifiers rather than common words.
IDENTIFIER_SHARE = 0.2

#: Common words of operations prose, most frequent first (the Zipf ranks follow this order).
_COMMON = """
the a to of and in is on for if it be this that with not when check run restart pod node
cluster service alert error logs log disk memory cpu latency request requests queue lag
replica leader database connection connections timeout failed failing high low increase
decrease rate traffic deploy deployment rollback config configuration metric metrics
dashboard grafana prometheus kubernetes kubectl namespace container image version upgrade
network dns certificate tls expired storage volume quota limit limits scale scaling
replicas primary secondary backup restore snapshot index query queries slow write read
writes reads throughput saturation errors budget burn page pager oncall escalate incident
postmortem mitigation diagnosis impact meaning runbook steps command output verify status
healthy unhealthy ready readiness liveness probe evicted pending scheduling taint
toleration affinity resource usage spike drop retry retries backoff circuit breaker load
balancer ingress egress firewall port endpoint api server client worker job cron batch
consumer producer topic partition offset commit broker zookeeper raft quorum election
member members peer peers sync replication wal checkpoint vacuum autovacuum lock locks
deadlock transaction cache hit miss eviction ttl key keys shard shards
region zone failover switchover maintenance window change freeze feature flag canary
percentage percent minutes hours seconds threshold warning critical severity label labels
selector annotation owner team contact slack channel ticket issue bug fix patch release
""".split()  # noqa: SIM905 - a block of prose words reads better than 300 quoted strings

_ALERT_PREFIXES = (
    "Kube",
    "Etcd",
    "Prometheus",
    "Alertmanager",
    "Node",
    "Pod",
    "Redis",
    "Postgres",
    "Kafka",
    "Gitaly",
    "Sidekiq",
    "Patroni",
    "Consul",
    "Vault",
    "Ceph",
    "Ingress",
    "Cert",
    "Thanos",
    "Loki",
    "Registry",
)
_ALERT_CONDITIONS = (
    "NoLeader",
    "HighLatency",
    "CrashLooping",
    "DiskFull",
    "MemoryPressure",
    "ReplicationLag",
    "TargetDown",
    "QuotaExceeded",
    "ErrorBudgetBurn",
    "ConfigReloadFailed",
    "HighRestarts",
    "TooManyConnections",
    "CertExpiring",
    "QueueBacklog",
    "SlowQueries",
)
_SERVICES = (
    "payments",
    "checkout",
    "search",
    "auth",
    "billing",
    "ledger",
    "gitaly",
    "registry",
    "runner",
    "web",
    "api",
    "sidekiq",
)
_ROLES = ("consumer", "worker", "gateway", "proxy", "db", "cache", "scheduler")
_KINDS = ("group", "pool", "service", "cluster", "replica")
_METRIC_SUBJECTS = ("container", "node", "kube", "process", "http", "grpc", "pg", "redis")
_METRIC_THINGS = ("memory", "cpu", "requests", "connections", "errors", "latency", "disk")
_METRIC_UNITS = ("bytes_total", "seconds_bucket", "total", "ratio", "in_flight")
_POD_STATES = (
    "CrashLoopBackOff",
    "OOMKilled",
    "ImagePullBackOff",
    "ErrImagePull",
    "ContainerCreating",
    "Terminating",
    "Evicted",
    "NodeNotReady",
)


def identifiers() -> list[str]:
    """About 2,300 distinct identifier tokens of the kinds runbooks name."""
    found = [f"{p}{c}" for p in _ALERT_PREFIXES for c in _ALERT_CONDITIONS]
    found += [f"{s}-{r}-{k}" for s in _SERVICES for r in _ROLES for k in _KINDS]
    found += [f"{s}_{t}_{u}" for s in _METRIC_SUBJECTS for t in _METRIC_THINGS for u in _METRIC_UNITS]
    found += [f"ERR_{n:04d}" for n in range(1, 401)]
    found += [f"{s}-{n:02d}.prod" for s in _SERVICES for n in range(1, 41)]
    found += list(_POD_STATES)
    return found


def _zipf(rng: np.random.Generator, size: int, count: int) -> npt.NDArray[np.int64]:
    """Indices into a vocabulary of ``size`` with probability ~ 1/(rank + 2)."""
    cumulative = np.cumsum(1.0 / (np.arange(size) + 2.0))
    drawn = np.searchsorted(cumulative, rng.random(count) * cumulative[-1], side="right")
    clipped: npt.NDArray[np.int64] = np.minimum(drawn, size - 1).astype(np.int64)
    return clipped


def _unit_vectors(rng: np.random.Generator, count: int) -> npt.NDArray[np.float32]:
    matrix = rng.standard_normal((count, DIMENSION), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


#: Chunks per topic, and the weights of the topic, document and chunk directions.
_TOPIC_CHUNKS = 500
_TOPIC, _DOCUMENT, _NOISE = 1.0, 0.8, 0.6
_BLOCK = 65_536


def clustered_vectors(rng: np.random.Generator, count: int) -> npt.NDArray[np.float32]:
    """Unit vectors: topic + document + chunk directions (see the module docstring);
    document j holds chunks ``[j*8, j*8+8)``. Built in blocks to bound temporaries."""
    topics = _unit_vectors(rng, max(1, count // _TOPIC_CHUNKS))
    documents = -(-count // CHUNKS_PER_DOCUMENT)
    topic_of = rng.integers(0, len(topics), size=documents)
    out = np.empty((count, DIMENSION), dtype=np.float32)
    for start in range(0, count, _BLOCK):
        end = min(count, start + _BLOCK)
        first, last = start // CHUNKS_PER_DOCUMENT, (end - 1) // CHUNKS_PER_DOCUMENT + 1
        own = _DOCUMENT * _unit_vectors(rng, last - first) + _TOPIC * topics[topic_of[first:last]]
        rows = np.arange(start, end) // CHUNKS_PER_DOCUMENT - first
        block = own[rows] + _NOISE * _unit_vectors(rng, end - start)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start:end] = block
    return out


def query_vectors(
    rng: np.random.Generator, vectors: npt.NDArray[np.float32], count: int
) -> npt.NDArray[np.float32]:
    """Each query near one chunk, as a question lies near the passage that answers it."""
    near = vectors[rng.integers(0, len(vectors), size=count)] + _NOISE * _unit_vectors(rng, count)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    return near.astype(np.float32)


@dataclass
class Corpus:
    """``texts[i]`` is chunk i; document j holds chunks ``[j*8, j*8+8)``."""

    texts: list[str]
    titles: list[str]
    vectors: npt.NDArray[np.float32]
    queries: list[str]
    query_vectors: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.texts)

    def prefix(self, chunks: int) -> Corpus:
        documents = -(-chunks // CHUNKS_PER_DOCUMENT)
        return Corpus(
            self.texts[:chunks],
            self.titles[:documents],
            self.vectors[:chunks],
            self.queries,
            self.query_vectors,
        )

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, lines in (("texts", self.texts), ("titles", self.titles), ("queries", self.queries)):
            with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as out:
                out.writelines(json.dumps(line) + "\n" for line in lines)
        np.save(folder / "vectors.npy", self.vectors)
        np.save(folder / "query_vectors.npy", self.query_vectors)

    @classmethod
    def load(cls, folder: Path, chunks: int | None = None) -> Corpus:
        """The first ``chunks`` chunks, reading no more than those: a worker measuring 1k
        chunks must not hold (or have held, for its peak RSS) the texts of 100k."""
        documents = None if chunks is None else -(-chunks // CHUNKS_PER_DOCUMENT)
        vectors = np.load(folder / "vectors.npy", mmap_mode="r")
        return cls(
            _read_lines(folder / "texts.jsonl", chunks),
            _read_lines(folder / "titles.jsonl", documents),
            vectors[:chunks] if chunks is not None else vectors,
            _read_lines(folder / "queries.jsonl", None),
            np.load(folder / "query_vectors.npy"),
        )


def _read_lines(path: Path, count: int | None) -> list[str]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in itertools.islice(lines, count)]


def generate(chunks: int, queries: int = 200, seed: int = 7) -> Corpus:
    rng = np.random.default_rng(seed)
    common = np.array(_COMMON, dtype=object)
    idents = np.array(identifiers(), dtype=object)
    rng.shuffle(idents)  # so Zipf ranks do not follow the generator's order
    lengths = rng.integers(60, 200, size=chunks)
    total = int(lengths.sum())
    is_ident = rng.random(total) < IDENTIFIER_SHARE
    tokens = np.empty(total, dtype=object)
    tokens[is_ident] = idents[_zipf(rng, len(idents), int(is_ident.sum()))]
    tokens[~is_ident] = common[_zipf(rng, len(common), total - int(is_ident.sum()))]
    ends = np.cumsum(lengths)
    texts = [" ".join(tokens[end - length : end]) for end, length in zip(ends, lengths, strict=True)]
    alerts = idents[_zipf(rng, len(idents), -(-chunks // CHUNKS_PER_DOCUMENT))]
    titles = [f"{alert} runbook" for alert in alerts]
    vectors = clustered_vectors(rng, chunks)
    return Corpus(
        texts,
        titles,
        vectors,
        make_queries(rng, common, idents, queries),
        query_vectors(rng, vectors, queries),
    )


def make_queries(
    rng: np.random.Generator, common: npt.NDArray[np.object_], idents: npt.NDArray[np.object_], count: int
) -> list[str]:
    """Short questions with one or two identifiers, as an on-call agent asks them."""
    found: list[str] = []
    for _ in range(count):
        words = list(common[_zipf(rng, len(common), int(rng.integers(3, 7)))])
        names = list(idents[_zipf(rng, len(idents), int(rng.integers(1, 3)))])
        found.append(" ".join([*names, *words]))
    return found


UPDATED_AT = datetime(2024, 1, 1, tzinfo=UTC)
LABELS = {SOURCE_LABEL: "synthetic", SOURCE_TYPE_LABEL: "bench"}


def documents(corpus: Corpus) -> Iterator[tuple[Document, list[Chunk], npt.NDArray[np.float32]]]:
    """The corpus as the index seam takes it: one document per eight chunks."""
    for number, title in enumerate(corpus.titles):
        start = number * CHUNKS_PER_DOCUMENT
        texts = corpus.texts[start : start + CHUNKS_PER_DOCUMENT]
        uri = f"synthetic://bench/{number:06d}"
        revision = sha256_hex("\n".join(texts))
        document = Document(uri, title, "\n\n".join(texts), revision, UPDATED_AT, LABELS)
        chunks = [
            Chunk(
                id=make_chunk_id(uri, ordinal, text),
                uri=uri,
                ordinal=ordinal,
                text=text,
                section=SECTIONS[ordinal % len(SECTIONS)],
                content_hash=sha256_hex(text),
                title=title,
                revision=revision,
                updated_at=UPDATED_AT,
                labels=LABELS,
            )
            for ordinal, text in enumerate(texts)
        ]
        vectors = np.ascontiguousarray(corpus.vectors[start : start + len(chunks)], dtype=np.float32)
        yield document, chunks, vectors
