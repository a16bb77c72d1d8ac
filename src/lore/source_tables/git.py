"""The model of a ``[[sources]]`` table of ``type = "git"``."""

from __future__ import annotations

import re
from pathlib import Path, PurePath, PurePosixPath
from typing import Literal

from pydantic import ConfigDict, Field, SecretStr, field_validator

from lore.source_tables.media import DEFAULT_EXCLUDE, DEFAULT_INCLUDE
from lore.source_tables.shared import SourceConfig, SourcePaths

_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[^\s~^:?*\[\\\x00-\x1f\x7f]+(?<![./])$")


class GitSourceConfig(SourceConfig):
    """One ``[[sources]]`` table of ``type = "git"``; any other key is refused."""

    model_config = ConfigDict(extra="forbid")

    #: Stricter than other types' names: it names the clone's directory.
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    type: Literal["git"] = "git"
    url: str
    #: None: the remote's default branch (its HEAD).
    branch: str | None = None
    #: Sub-path of the repository to index; globs are relative to it.
    path: str = ""
    include: list[str] = Field(default_factory=lambda: list(DEFAULT_INCLUDE))
    exclude: list[str] = Field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    ssh_key_file: Path | None = None
    #: lore's own known-hosts file; default ``<data_dir>/git/known_hosts``.
    known_hosts_file: Path | None = None
    #: False accepts (and records) an unknown host's key on first contact; a changed key
    #: is always refused.
    strict_host_key_checking: bool = True
    token_env: str | None = None
    token_file: Path | None = None
    #: The token itself (write-only: listings say only whether it is set); what a source
    #: added over the API carries instead of token_env/token_file.
    token: SecretStr | None = None
    allow_private_hosts: bool = False
    max_file_bytes: int = Field(default=2_000_000, gt=0)

    def location(self, settings: SourcePaths) -> str | None:
        where = self.url + (f" ({self.branch})" if self.branch else "")
        return f"{where} {self.path}/" if self.path else where

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and not _BRANCH.match(value):
            raise ValueError(f"{value!r} is not a valid branch name")
        return value

    @field_validator("path", mode="before")
    @classmethod
    def _sub_path_text(cls, value: object) -> object:
        # A generic ``[[sources]]`` table parsed elsewhere may carry a Path, or None.
        return "" if value is None else str(value) if isinstance(value, PurePath) else value

    @field_validator("path")
    @classmethod
    def _sub_path(cls, value: str) -> str:
        cleaned = PurePosixPath(value.strip().strip("/")) if value.strip().strip("/") else None
        if cleaned is None:
            return ""
        if cleaned.is_absolute() or ".." in cleaned.parts or str(cleaned).startswith("-"):
            raise ValueError(f"{value!r} must be a relative path inside the repository")
        return str(cleaned)
