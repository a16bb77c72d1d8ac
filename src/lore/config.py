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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from lore.errors import ConfigError

DEFAULT_CONFIG_FILE = "lore.toml"


class SourceConfig(BaseModel):
    """One ``[[sources]]`` table. Fields beyond these are kept for source types that
    need them (a git url, a Confluence space)."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    type: str = "filesystem"
    #: Deliberately without a default: an undeclared visibility is refused at sync.
    visibility: str | None = None
    path: Path | None = None
    include: list[str] = Field(
        default_factory=lambda: ["**/*.md", "**/*.markdown", "**/*.txt", "**/*.rst",
                                 "**/*.yaml", "**/*.yml", "**/*.toml", "**/*.json"]
    )
    exclude: list[str] = Field(default_factory=lambda: [".git/**", "**/node_modules/**"])
    labels: dict[str, str] = Field(default_factory=dict)
    max_file_bytes: int = Field(default=2_000_000, gt=0)


class SafetySettings(BaseModel):
    """The safety chain every tool result passes through (see ``lore.safety``)."""

    redact_emails: bool = False
    redact_phone_numbers: bool = False
    max_result_chars: int = Field(default=12_000, gt=0)
    max_passage_chars: int = Field(default=2_000, gt=0)
    #: Hosts (and their subdomains) whose links and images in retrieved text are kept;
    #: any other absolute link is neutralised, since it can exfiltrate data.
    allowed_link_hosts: list[str] = Field(default_factory=list)


class LoreSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LORE_",
        env_nested_delimiter="__",
        extra="ignore",
    )

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

    # -- embedding -------------------------------------------------------------------
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
    rrf_k: int = Field(default=60, gt=0)
    candidate_depth: int = Field(default=100, gt=0)
    #: How hybrid search merges its channels: "score" (min-max normalised scores, summed;
    #: Qdrant's DBSF) ranked higher than "rrf" (reciprocal ranks) in nDCG@10 on every set
    #: measured, on every backend (docs/quality.md); "rrf" keeps a little more Recall@100.
    fusion: Literal["rrf", "score"] = "score"
    #: BM25 field weights. Title and heading text is indexed in its own field *and* again
    #: in the identifier field, so it already counts more than once; extra boosts lowered
    #: BM25 nDCG@10 on SciFact and the examples (docs/quality.md, "Tuning experiments").
    #: The identifier field matches tokens like ``kube-apiserver`` whole.
    bm25_title_boost: float = Field(default=1.0, gt=0)
    bm25_section_boost: float = Field(default=1.0, gt=0)
    bm25_identifier_boost: float = Field(default=1.0, gt=0)
    reranker: str | None = None
    reranker_model: str | None = None
    reranker_url: str | None = None
    reranker_api_key: SecretStr | None = None

    # -- freshness, safety, audit ----------------------------------------------------
    stale_after_days: int = Field(default=180, gt=0)
    audit_path: Path = Path("lore-audit.jsonl")
    safety: SafetySettings = Field(default_factory=SafetySettings)

    sources: list[SourceConfig] = Field(default_factory=list)

    #: Where this configuration was read from (None: defaults and environment only).
    config_file: Path | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = _CONFIG_FILE_FOR_LOAD.get("path")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    def resolve_path(self, path: Path) -> Path:
        """Relative paths in a config file are relative to that file, not to the cwd."""
        if path.is_absolute() or self.config_file is None:
            return path
        return self.config_file.parent / path

    def resolved_cache_dir(self) -> Path:
        if self.cache_dir is not None:
            return self.resolve_path(self.cache_dir.expanduser())
        import platformdirs

        return platformdirs.user_cache_path("lore")


# pydantic-settings builds sources from the class, so the chosen file is passed aside.
_CONFIG_FILE_FOR_LOAD: dict[str, Path | None] = {"path": None}


def find_config_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    env = os.environ.get("LORE_CONFIG")
    if env:
        path = Path(env)
        if not path.is_file():
            raise ConfigError(f"LORE_CONFIG points to a missing file: {path}")
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def load_settings(config_file: str | os.PathLike[str] | None = None, **overrides: Any) -> LoreSettings:
    """Read settings; any problem becomes one ``ConfigError`` naming the bad field."""
    path = find_config_file(config_file)
    _CONFIG_FILE_FOR_LOAD["path"] = path
    try:
        settings = LoreSettings(**overrides)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in err.errors()
        )
        where = f" in {path}" if path else ""
        raise ConfigError(f"invalid settings{where}: {problems}") from err
    except (OSError, ValueError) as err:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"cannot read {path}: {err}") from err
    finally:
        _CONFIG_FILE_FOR_LOAD["path"] = None
    settings.config_file = path.resolve() if path else None
    return settings
