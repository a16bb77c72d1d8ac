"""Settings: ``lore.toml`` (or the file named by ``LORE_CONFIG``), overridden by ``LORE_*``
environment variables, overridden by explicit keyword arguments.

    # lore.toml
    backend = "sqlite"
    db_path = "lore.db"

    [[sources]]
    name = "runbooks"
    type = "filesystem"
    path = "examples/runbooks"
    visibility = "all-viewers"

Every field below maps to ``LORE_<FIELD>`` (``LORE_TOP_K=5``, ``LORE_BACKEND=pgvector``).

A key no model declares is an error naming it and the nearest valid key, at the top level,
in nested tables (``[safety]``, ``LORE_SAFETY__*``) and in each ``[[sources]]`` table, which
the model of its ``type`` validates (``lore.source_tables``). Unknown top-level ``LORE_*``
variables are ignored: other programs may use the prefix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, SerializeAsAny, ValidationError, field_validator
from pydantic_core import ErrorDetails

from lore.config_sources import merged_values
from lore.errors import ConfigError
from lore.schedule_cadence import VAULT_DEFAULT_EVERY
from lore.source_tables import TENANT_PATTERN as TENANT_PATTERN
from lore.source_tables import SourceConfig as SourceConfig
from lore.source_tables import cadence, typed_source_config
from lore.source_tables import check_access_groups as check_access_groups
from lore.source_tables import field_problem as field_problem
from lore.source_tables import unknown_key_message as unknown_key_message

DEFAULT_CONFIG_FILE = "lore.toml"


class SafetySettings(BaseModel):
    """The safety chain every tool result passes through (see ``lore.safety``)."""

    model_config = ConfigDict(extra="forbid")

    redact_emails: bool = False
    redact_phone_numbers: bool = False
    max_result_chars: int = Field(default=12_000, gt=0)
    max_passage_chars: int = Field(default=2_000, gt=0)
    #: Hosts (and their subdomains) whose links and images in retrieved text are kept;
    #: any other absolute link is neutralised, since it can exfiltrate data.
    allowed_link_hosts: list[str] = Field(default_factory=list)


class EventSettings(BaseModel):
    """Retrieval events, the analytics record (``lore.events``, docs/observability.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    #: Events (with their feedback) and alert suggestions older than this are pruned.
    retention_days: int = Field(default=90, gt=0)
    #: Events waiting for the background writer; beyond it they are dropped and counted.
    queue_size: int = Field(default=1000, gt=0)


#: ``[vault] weight``'s default (docs/quality.md, "Source priority").
VAULT_DEFAULT_WEIGHT = 0.75


class VaultSettings(BaseModel):
    """The built-in playbook pack (``lore.vault``): indexed unless switched off here, so
    an existing lore.toml without a ``[vault]`` table gets it too."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    #: How often ``lore sync --watch`` and the service re-sync the pack (a new lore
    #: release updates it); written like a source's ``every``.
    every: timedelta = VAULT_DEFAULT_EVERY
    #: The pack's priority against the team's own sources (weight 1 unless set): its
    #: passages' scores are multiplied by this, so a team's page that answers comparably
    #: comes first and the pack fills in where the team has nothing (``lore.priority``,
    #: docs/quality.md).
    weight: float = Field(default=VAULT_DEFAULT_WEIGHT, gt=0.0, le=10.0)
    #: The pack's playbooks served and exported as Agent Skills (``lore.skills``) beside
    #: the team's own procedures; false leaves them out of ``skills/list`` and exports.
    skills: bool = True

    @field_validator("every", mode="before")
    @classmethod
    def _cadence(cls, value: object) -> object:
        return cadence(value)


#: The signature algorithms an IdP's access token may use: asymmetric only, so never
#: ``none`` and never an HMAC keyed with a public key.
JwsAlgorithm = Literal[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"
]

_DEFAULT_JWS: tuple[JwsAlgorithm, ...] = ("RS256", "PS256", "ES256")


class OAuthSettings(BaseModel):
    """``[serve.oauth]``: lore as an OAuth 2.1 resource server (docs/service.md, "Identity
    providers (OAuth)"). Access tokens (JWTs) from ``issuer`` are checked locally against
    its JWKS; their claims map to a ``Principal`` by the fields below and nothing else."""

    model_config = ConfigDict(extra="forbid")

    #: The authorization server's issuer identifier, exactly as its tokens' ``iss``.
    issuer: str = Field(min_length=1)
    #: lore's resource URI (RFC 8707), e.g. ``https://lore.example.com/mcp``: tokens must
    #: name it in ``aud``; it is also the ``resource`` of the protected-resource metadata.
    resource: str = Field(min_length=1)
    #: Further accepted audiences (Entra ID's ``api://<app id>``, say); none by default.
    audiences: list[str] = Field(default_factory=list)
    #: The issuer's key set; None: read ``jwks_uri`` from the issuer's metadata
    #: (``/.well-known/oauth-authorization-server``, then ``openid-configuration``).
    jwks_uri: str | None = None
    #: Signature algorithms accepted (asymmetric only: no ``none``, no HS*).
    algorithms: list[JwsAlgorithm] = Field(default_factory=lambda: list(_DEFAULT_JWS), min_length=1)
    #: Scopes a client should ask for (``scopes_supported`` and the 401's ``scope``).
    scopes: list[str] = Field(default_factory=list)
    subject_claim: str = "sub"
    #: A claim holding a list (or space-separated string) of group names; None: no groups.
    groups_claim: str | None = "groups"
    #: A claim holding the tenant; when set, a token without it is refused.
    tenant_claim: str | None = None
    #: A claim naming the person (``email``, ``preferred_username``, ``upn``), which access
    #: lists name users by (Confluence pages restricted to people): the principal's
    #: ``user``. None: principals carry no user and match no user entry. ``email`` counts
    #: only when the token does not say ``email_verified`` is false.
    user_claim: str | None = None
    #: Scopes (in ``scope``/``scp``) or groups granting each role; the highest wins.
    admin_scopes: list[str] = Field(default_factory=list)
    admin_groups: list[str] = Field(default_factory=list)
    editor_scopes: list[str] = Field(default_factory=list)
    editor_groups: list[str] = Field(default_factory=list)
    viewer_scopes: list[str] = Field(default_factory=list)
    viewer_groups: list[str] = Field(default_factory=list)
    #: A valid token granting no role above: refused (None) or this role ("viewer").
    default_role: Literal["viewer"] | None = None
    #: Clock skew allowed on ``exp``/``nbf``/``iat``, in seconds.
    leeway_seconds: int = Field(default=60, ge=0, le=300)
    #: At most one key-set fetch this often for a token whose ``kid`` is unknown.
    jwks_refresh_seconds: float = Field(default=30.0, ge=1.0)


class ServeSettings(BaseModel):
    """``[serve]``: what ``lore serve`` exposes beyond the API (docs/observability.md)."""

    model_config = ConfigDict(extra="forbid")

    #: Whether ``GET /metrics`` wants a bearer token (any role). None: only when bound to
    #: an address other than 127.0.0.1, since Prometheus scrapers usually carry no token
    #: and a loopback listener is reachable from this machine only.
    metrics_token_required: bool | None = None
    #: The weights ``lore serve`` and ``lore mcp --http`` embed queries with: "int8" (an
    #: int8 copy of the local model, made once and checked against float32; about 1.8x
    #: less CPU a query, the same rankings within 0.002 nDCG@10; ``lore.embedders.
    #: query_weights``) or "float32" (the model as converted). Documents are always
    #: embedded in float32.
    query_weights: Literal["int8", "float32"] = "int8"
    #: Requests per second per principal (each token, or the local user), on average and
    #: at most at once: one token bucket for ``/v1`` and ``/mcp``; past it, 429 with
    #: ``Retry-After``. Raise it for many agents sharing one token.
    rate_limit: float = Field(default=50.0, gt=0)
    rate_burst: int = Field(default=100, ge=1)
    #: Host names (``lore.example.com``, ``*.example.com``) clients reach the server by,
    #: beside 127.0.0.1, localhost and [::1]: any other ``Host:`` is refused (DNS
    #: rebinding; lore.web.guard). Empty: checked only on a loopback server; ``["*"]``:
    #: never checked.
    allowed_hosts: list[str] = Field(default_factory=list)
    #: Access tokens from an identity provider, beside lore's own tokens; None: lore's only.
    oauth: OAuthSettings | None = None


class ElasticsearchSettings(BaseModel):
    """``[elasticsearch]``: the cluster of ``backend = "elasticsearch"`` or ``"opensearch"``.

    Credentials come from here, ``LORE_ELASTICSEARCH__*`` or a file (``*_file``, e.g. a
    mounted secret); they are sent to the cluster and never logged."""

    model_config = ConfigDict(extra="forbid")

    #: One or more node URLs, comma-separated (``https://es1:9200,https://es2:9200``).
    url: str | None = None
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    #: A PEM bundle to verify the cluster's certificate with (a private CA).
    ca_file: Path | None = None
    verify_certs: bool = True
    timeout: float = Field(default=10.0, gt=0, le=300)
    number_of_shards: int = Field(default=1, gt=0)
    number_of_replicas: int = Field(default=1, ge=0)


class DiscoveryEngineSettings(BaseModel):
    """``[discovery_engine]``: a Vertex AI Search (Discovery Engine) app or data store,
    searched through its ``servingConfigs/*:search`` REST method."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = None
    location: str = "global"
    collection: str = "default_collection"
    #: Exactly one of the two: an engine (a search app) or a data store.
    engine: str | None = None
    data_store: str | None = None
    serving_config: str = "default_search"
    #: Where the REST API lives; None: ``https://discoveryengine.googleapis.com`` for the
    #: ``global`` location, ``https://<location>-discoveryengine.googleapis.com`` otherwise.
    api_base: str | None = None
    #: Extractive segments asked per result (their text becomes the passage); 0: snippets only.
    extractive_segments: int = Field(default=1, ge=0, le=10)
    timeout: float = Field(default=10.0, gt=0, le=300)


class FallbackSettings(BaseModel):
    """``[fallback]``: a keyword index that answers while the primary backend cannot
    (``lore.backends.fallback``). ``lore sync`` writes every document to it as well as to
    the primary (``lore.backends.mirror``), with the same vectors, so it costs a second
    write and no second embedding."""

    model_config = ConfigDict(extra="forbid")

    #: The embedded SQLite index is the only fallback store: it needs no server to be up.
    backend: Literal["sqlite"] = "sqlite"
    db_path: Path = Path("lore-fallback.db")
    #: Consecutive failures of the primary that open the circuit breaker.
    failures: int = Field(default=3, ge=1, le=1000)
    #: A primary search slower than this is cut off, answered from the fallback, and
    #: counts as a failure.
    latency_budget_ms: int = Field(default=2000, gt=0, le=120_000)
    #: Seconds the breaker stays open before one search probes the primary again.
    cooldown_s: float = Field(default=30.0, ge=0, le=3600)


class RunbookUrlRule(BaseModel):
    """One ``[[alerts.runbook_urls]]`` table: alert ``runbook_url`` annotations starting
    with ``prefix`` name a document of source ``source``; the rest of the URL (its
    ``#anchor`` aside) is the path inside the source, after ``path_prefix``. Matching
    ignores case and a missing ``.md``, as published runbook sites lower-case their pages."""

    model_config = ConfigDict(extra="forbid")

    prefix: str = Field(min_length=1)
    source: str = Field(min_length=1)
    path_prefix: str = ""


class AlertSettings(BaseModel):
    """``[alerts]``: how ``lore alert`` / ``runbook_for_alert`` read an alert."""

    model_config = ConfigDict(extra="forbid")

    runbook_urls: list[RunbookUrlRule] = Field(default_factory=list)
    #: Alert labels that boost passages of documents carrying the same label value.
    boost_labels: list[str] = Field(default_factory=lambda: ["service", "namespace", "job", "severity"])


class LoreSettings(BaseModel):
    """Every setting, read from the config file, then ``LORE_*`` variables, then keyword
    arguments, each overriding the one before (``lore.config_sources``), as a
    pydantic-settings ``BaseSettings`` with those three sources would: not one, since
    importing pydantic-settings costs about a tenth of a cold ``lore search`` (it imports
    its every source, dotenv, importlib.metadata and resources, and builds models), and
    most runs set no such variable (then it is never imported)."""

    # As BaseSettings configures itself. A misspelt key must be an error, not a default
    # silently used instead. Unknown top-level LORE_* variables are still ignored (only
    # the variables of declared fields are read): other programs may share the prefix.
    model_config = ConfigDict(extra="forbid", validate_default=True, arbitrary_types_allowed=True)

    def __init__(self, **values: Any) -> None:
        super().__init__(**merged_values(type(self), _CONFIG_FILE_FOR_LOAD.get("path"), values))

    # -- where the index lives -------------------------------------------------------
    backend: str = "sqlite"
    db_path: Path = Path("lore.db")
    #: Table-set / collection name for server backends, so indexes can share a server.
    index_name: str = Field(default="lore", pattern=r"^[a-z][a-z0-9_]{0,40}$")
    pg_dsn: SecretStr | None = None
    qdrant_url: str | None = None
    qdrant_path: Path | None = None
    #: Sent as the ``api-key`` header to a Qdrant server (``qdrant_url``); unused in local mode.
    qdrant_api_key: SecretStr | None = None
    elasticsearch: ElasticsearchSettings = Field(default_factory=ElasticsearchSettings)
    discovery_engine: DiscoveryEngineSettings = Field(default_factory=DiscoveryEngineSettings)
    #: None: no fallback; searches fail while the backend is unreachable.
    fallback: FallbackSettings | None = None

    # -- embedding -------------------------------------------------------------------
    #: "none": no embedding model, keyword search only (elasticsearch/opensearch backends).
    embedder: str = "local"
    embedding_model: str | None = None
    embedding_base_url: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_batch_size: int = Field(default=32, gt=0)
    #: Vector size to ask a remote model for (OpenAI ``dimensions``, Gemini
    #: ``outputDimensionality``); None: the model's own size.
    embedding_dimensions: int | None = Field(default=None, gt=0)
    #: What runs the local model: "auto" is OpenVINO where installed (same vectors, about
    #: 1.2x PyTorch's throughput on a small CPU; docs/embedders.md), else PyTorch.
    embedding_runtime: Literal["auto", "torch", "openvino"] = "auto"
    #: Seconds a remote embedder may take to embed a search query, retries included. Past
    #: it, hybrid search answers from BM25 alone and says so (``degraded``); sync keeps
    #: its own, patient retry policy.
    query_embedding_timeout: float = Field(default=5.0, gt=0, le=120)
    #: Derived files worth keeping between runs (the local model converted for OpenVINO);
    #: None: the user cache directory (``~/.cache/lore`` on Linux).
    cache_dir: Path | None = None

    # -- chunking --------------------------------------------------------------------
    #: Token budget per chunk; None sizes it from the embedder's input window.
    chunk_tokens: int | None = Field(default=None, gt=16)
    chunk_overlap: int = Field(default=32, ge=0)

    # -- retrieval -------------------------------------------------------------------
    top_k: int = Field(default=8, gt=0, le=100)
    #: The agent tool (MCP, HTTP, the adapters, ``lore search``) answers "no matching
    #: knowledge" when no passage reaches this confidence (``lore.confidence``); "none"
    #: shows every answer. ``lore eval`` never applies it.
    min_confidence: Literal["none", "low", "medium", "high"] = "low"
    rrf_k: int = Field(default=60, gt=0)
    candidate_depth: int = Field(default=100, gt=0)
    #: Stored vectors from which the sqlite backend searches an approximate index
    #: (HNSW, int8, re-scored exactly) instead of scanning them all in memory: below it
    #: the exact scan is exact and, on an idle machine, fast; above it the float32 matrix
    #: would not fit a small machine (docs/benchmarks.md, "A million chunks").
    ann_threshold: int = Field(default=200_000, gt=0)
    #: With ``fulltext_shards`` above 1: chunks from which the sqlite backend splits its
    #: BM25 index into that many tantivy indexes searched side by side. Off by default
    #: (1 shard): at 1M chunks on a loaded 2-core machine two shards cost 5-14% more CPU
    #: per search and gained no steady wall time (bench/history/benchmarks.md, "1M chunks,
    #: full-text shards"). Crossing the threshold, or changing the count, rebuilds the
    #: full-text index from SQLite, as ``lore reindex`` does (docs/backends.md).
    fulltext_shard_threshold: int = Field(default=500_000, gt=0)
    fulltext_shards: int = Field(default=1, ge=1, le=64)
    #: How hybrid search merges its channels: "score" (min-max normalised scores, summed;
    #: Qdrant's DBSF) ranked higher than "rrf" (reciprocal ranks) in nDCG@10 on every set
    #: measured, on every backend (docs/quality.md); "rrf" keeps a little more Recall@100.
    fusion: Literal["rrf", "score"] = "score"
    #: BM25 field weights. On SQLite and pgvector a chunk's whole text (title, section,
    #: body, path) is one field, and a title or file name that is a *name* (a few words,
    #: no sentence ending) is searched again in a field of its own at ``bm25_title_boost``;
    #: ``bm25_section_boost`` weighs the section field of Elasticsearch/OpenSearch only.
    #: Extra boosts lowered nDCG@10 on SciFact and the examples (docs/quality.md). The
    #: identifier field matches tokens like ``kube-apiserver`` whole.
    bm25_title_boost: float = Field(default=1.0, gt=0)
    bm25_section_boost: float = Field(default=1.0, gt=0)
    bm25_identifier_boost: float = Field(default=1.0, gt=0)
    reranker: str | None = None
    reranker_model: str | None = None
    reranker_url: str | None = None
    reranker_api_key: SecretStr | None = None

    # -- sync ------------------------------------------------------------------------
    #: Largest share of a source's documents one sync may prune (more than one document
    #: and more than this share is refused unless ``lore sync --allow-mass-delete``).
    max_prune_fraction: float = Field(default=0.5, ge=0, le=1)
    #: Where lore keeps what is not the index: git clones (``git/<source name>``), and
    #: what ``lore serve`` keeps (uploads and notes with their originals content-addressed,
    #: tokens, the server secret, service-managed sources). None: ``<db_path>.data`` beside
    #: the SQLite file (see ``resolved_data_dir``).
    data_dir: Path | None = None
    vault: VaultSettings = Field(default_factory=VaultSettings)

    # -- freshness, safety, audit ----------------------------------------------------
    stale_after_days: int = Field(default=180, gt=0)
    audit_path: Path = Path("lore-audit.jsonl")
    safety: SafetySettings = Field(default_factory=SafetySettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    events: EventSettings = Field(default_factory=EventSettings)

    #: Each one an instance of its type's model; SerializeAsAny so dumps keep its own keys.
    sources: list[SerializeAsAny[SourceConfig]] = Field(default_factory=list)

    @field_validator("sources", mode="before")
    @classmethod
    def _typed_sources(cls, value: object) -> object:
        """Each table validated by its type's own model (raises ConfigError, naming the
        source, for an unknown type or key)."""
        if not isinstance(value, list | tuple):
            return value  # pydantic reports the wrong type
        return [typed_source_config(item, number) for number, item in enumerate(value, start=1)]

    #: Where this configuration was read from (None: defaults and environment only).
    config_file: Path | None = None

    def resolve_path(self, path: Path) -> Path:
        """Relative paths in a config file are relative to that file, not to the cwd."""
        if path.is_absolute() or self.config_file is None:
            return path
        return self.config_file.parent / path

    def resolved_data_dir(self) -> Path:
        """``data_dir``, or ``<db_path>.data`` (``lore.db.data/`` by default): beside the
        index it serves, so that removing ``lore.db*`` removes its clones too."""
        if self.data_dir is not None:
            return self.resolve_path(self.data_dir.expanduser())
        db_path = self.resolve_path(self.db_path)
        return db_path.with_name(db_path.name + ".data")

    def resolved_cache_dir(self) -> Path:
        if self.cache_dir is not None:
            return self.resolve_path(self.cache_dir.expanduser())
        import platformdirs

        return platformdirs.user_cache_path("lore")


# The file load_settings chose, for LoreSettings.__init__ (whose keyword arguments are settings).
_CONFIG_FILE_FOR_LOAD: dict[str, Path | None] = {"path": None}


def find_config_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    if explicit is not None:
        path = Path(explicit)
        if path.is_dir():
            raise ConfigError(f"config file {path} is a directory: name the lore.toml inside it")
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    env = os.environ.get("LORE_CONFIG")
    if env:
        path = Path(env)
        if path.is_dir():
            raise ConfigError(f"LORE_CONFIG points to a directory, {path}: name the lore.toml inside it")
        if not path.is_file():
            raise ConfigError(f"LORE_CONFIG points to a missing file: {path}")
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def load_settings(config_file: str | os.PathLike[str] | None = None, **overrides: Any) -> LoreSettings:
    """Read settings; any problem becomes one one-line ``ConfigError`` that says where it
    is (the file, or the environment variable) and names the bad key or field."""
    path = find_config_file(config_file)
    where = str(path) if path is not None else "settings"
    _CONFIG_FILE_FOR_LOAD["path"] = path
    try:
        settings = LoreSettings(**overrides)
    except ValidationError as err:
        problems = "; ".join(_describe_error(error, where) for error in err.errors())
        raise ConfigError(problems) from err
    except ConfigError as err:  # a [[sources]] table, refused by its type's model
        raise ConfigError(f"{where}: {err}") from err
    except (OSError, ValueError) as err:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"cannot read {path}: {err}") from err
    finally:
        _CONFIG_FILE_FOR_LOAD["path"] = None
    settings.config_file = path.resolve() if path else None
    return settings


def _describe_error(error: ErrorDetails, where: str) -> str:
    loc = error["loc"]
    env_var = "LORE_" + "__".join(str(part) for part in loc).upper()
    origin = env_var if env_var in os.environ else where
    if error["type"] == "extra_forbidden" and loc:
        model, table = _model_at(loc[:-1])
        valid = [name for name in model.model_fields if name != "config_file"]
        return f"{origin}: {unknown_key_message(str(loc[-1]), valid, table)}"
    field = ".".join(str(part) for part in loc) or "settings"
    return f"{origin}: {field}: {field_problem(error)}"


def _model_at(loc: Sequence[int | str]) -> tuple[type[BaseModel], str | None]:
    """The settings model of the nested table at ``loc`` (``("safety",)``), and how the
    table is written in lore.toml (``[safety]``)."""
    model: type[BaseModel] = LoreSettings
    for part in loc:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        # An optional table (``[fallback]``): the model inside ``X | None``.
        annotation = next((arg for arg in get_args(annotation) if arg is not type(None)), annotation)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        model = annotation
    names = [str(part) for part in loc if isinstance(part, str)]
    return model, (f"[{'.'.join(names)}]" if names else None)
