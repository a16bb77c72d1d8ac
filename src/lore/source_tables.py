"""The ``[[sources]]`` tables of lore.toml: the keys every source type shares
(``SourceConfig``), each type's model, which refuses keys it does not declare, and the
validation of a table by its ``type`` (``typed_source_config``).

Below the settings (``lore.config`` validates ``LoreSettings.sources`` with it) and below
the sources (``lore.sources`` builds each type's source from its validated table), so
that loading settings imports no source and no source module sits above the settings
that name it. A table says where it reads from given the settings' paths
(``SourcePaths``, which ``LoreSettings`` provides).
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path, PurePath, PurePosixPath
from typing import Literal, Protocol
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from lore.access import USER_ENTRY, identity
from lore.errors import ConfigError
from lore.extract import MEDIA_TYPES as CONVERTED_MEDIA_TYPES
from lore.extract import TEXT_MEDIA_TYPES
from lore.schedule_cadence import parse_every


class SourcePaths(Protocol):
    """What a table needs of the settings to say where its files are."""

    def resolve_path(self, path: Path) -> Path: ...

    def resolved_data_dir(self) -> Path: ...


def cadence(value: object) -> object:
    """An ``every`` value: only the written form (``"6h"``), since a bare number would be
    read as seconds."""
    if value is None or isinstance(value, timedelta):
        return value
    # PydanticCustomError: the message alone, without pydantic's "Value error, ".
    if not isinstance(value, str):
        raise PydanticCustomError("duration", 'write a duration as a string, e.g. every = "6h"')
    try:
        return parse_every(value)
    except ValueError as err:
        raise PydanticCustomError("duration", "{reason}", {"reason": str(err)}) from err


#: A tenant's name in a ``[[sources]]`` table.
TENANT_PATTERN = r"^[A-Za-z0-9_.-]+$"


def bad_group_name(group: str) -> bool:
    """Not a group an access list may name: empty, ``*`` (every viewer is ``visibility =
    "all-viewers"``), with whitespace, or spelling a person's entry (``user:...``)."""
    return not group or group == "*" or any(c.isspace() for c in group) or group.startswith(USER_ENTRY)


def check_access_groups(value: list[str] | None) -> list[str] | None:
    """The ``access`` key every source type shares: group names, at least one, not ``*``
    (every viewer is ``visibility = "all-viewers"``)."""
    if value is None:
        return None
    groups = [group.strip() for group in value]
    if not groups:
        raise ValueError('names no group; list who may read it, e.g. ["sre"], or set visibility')
    if bad := [group for group in groups if bad_group_name(group)]:
        raise ValueError(
            f"{bad[0]!r} is not a group name (no spaces, not '*', not starting with {USER_ENTRY!r}; "
            'every viewer is visibility = "all-viewers")'
        )
    return groups


class SourceConfig(BaseModel):
    """One ``[[sources]]`` table: the keys every source type shares.

    The rest of a table belongs to its type, which declares a model of its own (a
    subclass below, e.g. ``FilesystemSourceConfig``) registered in ``SOURCE_MODELS``. Loading
    settings replaces each table by that model, which refuses keys it does not declare:
    a misspelt ``exclude`` must not index the drafts it meant to leave out. Extra keys are
    allowed here only so that Python callers may pass a whole table to this class.
    """

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    type: str = "filesystem"
    #: Deliberately without a default: an undeclared visibility is refused at sync.
    visibility: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    #: How often ``lore sync --watch`` (and the service) syncs it; None: only when asked.
    every: timedelta | None = None

    @field_validator("every", mode="before")
    @classmethod
    def _cadence(cls, value: object) -> object:
        return cadence(value)

    #: The groups that may read its documents (``visibility = "restricted"`` is then
    #: implied); None: the visibility alone decides (``lore.sources.scope``).
    access: list[str] | None = None
    #: The tenant its documents belong to; None: the index's default tenant.
    tenant: str | None = Field(default=None, pattern=TENANT_PATTERN)
    #: Its priority: each of its passages' scores is multiplied by this before the answer
    #: is cut to ``top_k`` (``lore.priority``). Below 1 it yields to sources that answer
    #: comparably; above 1 it goes first.
    weight: float = Field(default=1.0, gt=0.0, le=10.0)
    #: Which of its documents are procedures, served and exported as Agent Skills
    #: (``lore.skills``): true for every document, or gitignore-style globs over the
    #: path below the source (``["runbooks/**", "!runbooks/drafts/"]``). Beside this, a
    #: document is a skill when its front matter says ``skill: true`` or lists
    #: ``alerts:`` or ``symptoms:`` (``skill: false`` keeps it out).
    skills: bool | list[str] = False

    _access = field_validator("access")(check_access_groups)

    @field_validator("skills")
    @classmethod
    def _skill_globs(cls, value: bool | list[str]) -> bool | list[str]:
        if isinstance(value, list) and not [glob for glob in value if glob.strip()]:
            raise ValueError('names no glob; write skills = true for every document, or ["runbooks/**"]')
        return value

    def location(self, settings: SourcePaths) -> str | None:
        """Where the source reads from, for ``lore sources``; None when it has no such thing."""
        return None


def unknown_key_message(key: str, valid: Iterable[str], table: str | None = None) -> str:
    """``unknown key 'excludes' in [[sources]] "runbooks" (did you mean 'exclude'?)``."""
    message = f"unknown key {key!r}"
    if table:
        message += f" in {table}"
    close = difflib.get_close_matches(key, list(valid), n=1)
    return message + (f" (did you mean {close[0]!r}?)" if close else "")


def field_problem(error: ErrorDetails) -> str:
    """pydantic's message, except where it names a Python class instead of what to write."""
    if error["type"] == "path_type":
        return f"should be a path, written as a string, not {error['input']!r}"
    return error["msg"]


# -- the types ---------------------------------------------------------------------------

#: Text formats, then the ones lore.extract converts to Markdown (.pdf, .docx, .html, .htm).
MEDIA_TYPES: dict[str, str] = {**TEXT_MEDIA_TYPES, **CONVERTED_MEDIA_TYPES}
DEFAULT_INCLUDE = tuple(f"**/*{suffix}" for suffix in MEDIA_TYPES)
DEFAULT_EXCLUDE = (".git/", "**/node_modules/")


class FilesystemSourceConfig(SourceConfig):
    """A ``[[sources]]`` table of ``type = "filesystem"``; any other key is refused."""

    model_config = ConfigDict(extra="forbid")

    #: Optional here so that ``lore sources`` can list the table; sync refuses it.
    path: Path | None = None
    include: list[str] = Field(default_factory=lambda: list(DEFAULT_INCLUDE))
    exclude: list[str] = Field(default_factory=lambda: [".git/**", "**/node_modules/**"])
    max_file_bytes: int = Field(default=2_000_000, gt=0)

    def location(self, settings: SourcePaths) -> str | None:
        return str(settings.resolve_path(self.path)) if self.path is not None else None


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


#: Space keys as Confluence allows them (``~`` opens a personal space's key).
SPACE_KEY_PATTERN = r"^~?[A-Za-z0-9_-]{1,255}$"
_LOOPBACK_NAMES = ("localhost",)


class ConfluenceSourceConfig(SourceConfig):
    """One Confluence site, Cloud or Data Center, and the spaces of it to index.

    There is no ``include_archived``: archived and draft pages are never indexed.
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["confluence"] = "confluence"
    #: The site: ``https://<site>.atlassian.net`` (Cloud; a trailing ``/wiki`` is fine) or
    #: the Data Center base URL with its context path (``https://wiki.example.com/confluence``).
    url: str
    deployment: Literal["cloud", "datacenter"] = "cloud"
    #: Space keys to index; required and never discovered, so adding a space is a decision.
    spaces: list[str] = Field(min_length=1)
    #: Cloud: the Atlassian account the API token belongs to (HTTP Basic). Data Center: unset,
    #: the token is a personal access token sent as a Bearer token.
    email: str | None = None
    token_env: str | None = None
    token_file: Path | None = None
    #: The token itself (write-only: listings say only whether it is set); what a source
    #: added over the API carries instead of token_env/token_file.
    token: SecretStr | None = None
    #: Results asked for per request (Cloud v2 allows 250; servers may return fewer).
    page_size: int = Field(default=100, ge=1, le=250)
    #: Seconds to connect, and to wait for each response.
    connect_timeout: float = Field(default=10.0, gt=0, le=300)
    read_timeout: float = Field(default=60.0, gt=0, le=600)
    #: Attempts per request after the first, on 429, 5xx and transport errors.
    max_retries: int = Field(default=5, ge=0, le=20)
    #: Longest ``Retry-After`` honoured, in seconds; a server asking for longer fails the
    #: listing (nothing is pruned) instead of holding the sync's write lock for it.
    max_retry_after: float = Field(default=120.0, ge=0, le=3600)
    #: First back-off after a 5xx (doubled per attempt, capped at ``max_retry_after``).
    backoff_seconds: float = Field(default=1.0, ge=0, le=60)
    #: Requests in flight at once (restriction checks, labels, single pages).
    max_concurrency: int = Field(default=4, ge=1, le=32)
    #: A page with view restrictions (its own or an ancestor's): "skip" leaves it out;
    #: "honour" indexes it for the readers every restricted level names, mapped to lore's
    #: groups and users below (docs/ingestion.md, "Page restrictions").
    restricted_pages: Literal["skip", "honour"] = "skip"
    #: Confluence group name -> the lore group (as principals carry it) it stands for.
    restriction_groups: dict[str, str] = Field(default_factory=dict)
    #: Whether a Confluence group missing from ``restriction_groups`` stands for the lore
    #: group of the same name (groups provisioned from the same IdP); else it grants nobody.
    restriction_groups_as_named: bool = False
    #: Confluence user (Cloud ``accountId``; Data Center ``username`` or ``userKey``) -> the
    #: identity a principal carries as ``user`` (its IdP's email claim, say).
    restriction_users: dict[str, str] = Field(default_factory=dict)
    #: Whether a restricted user missing from ``restriction_users`` is known by the email
    #: address Confluence returns for them (Cloud shows it only where the profile allows).
    restriction_user_emails: bool = False

    @field_validator("spaces")
    @classmethod
    def _spaces(cls, value: list[str]) -> list[str]:
        keys = [key.strip() for key in value]
        bad = [key for key in keys if not re.match(SPACE_KEY_PATTERN, key)]
        if bad:
            raise ValueError(f"not a Confluence space key: {', '.join(repr(key) for key in bad)}")
        if len(set(keys)) != len(keys):
            raise ValueError("a space is listed twice")
        return keys

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL")
        if parts.username or parts.password:
            raise ValueError("credentials in the URL are refused; use email and token_env or token_file")
        if parts.query or parts.fragment:
            raise ValueError(f"{value!r}: the site URL takes no query or fragment")
        if parts.scheme == "http" and not is_loopback(parts.hostname):
            raise ValueError(f"{value!r}: plain http would send the token in clear; use https")
        return value.strip().rstrip("/")

    @model_validator(mode="after")
    def _auth(self) -> ConfluenceSourceConfig:
        given = sum(bool(value) for value in (self.token_env, self.token_file, self.token))
        if given > 1:
            raise ValueError("set one of token, token_env or token_file")
        if not given:
            raise ValueError("set token_env or token_file (the API token or personal access token)")
        if self.deployment == "cloud" and not self.email:
            raise ValueError("a Cloud site needs email (the account the API token belongs to)")
        if self.deployment == "datacenter" and self.email:
            raise ValueError("a Data Center personal access token is sent alone; remove email")
        return self

    @model_validator(mode="after")
    def _restrictions(self) -> ConfluenceSourceConfig:
        if bad := [group for group in self.restriction_groups.values() if bad_group_name(group)]:
            raise ValueError(f"restriction_groups: {bad[0]!r} is not a lore group name")
        if bad := [person for person in self.restriction_users.values() if identity(person) is None]:
            raise ValueError(
                f"restriction_users: {bad[0]!r} is not an identity (an ASCII email address or subject)"
            )
        if self.restricted_pages != "honour":
            return self
        if self.visibility != "all-viewers" and not self.access:
            raise ValueError(
                'restricted_pages = "honour" needs the space\'s readers: visibility = "all-viewers" '
                "or access = [...] (a restricted page is readable by those its restrictions name "
                "among them)"
            )
        mapped = self.restriction_groups or self.restriction_groups_as_named or self.restriction_users
        if not (mapped or self.restriction_user_emails):
            raise ValueError(
                'restricted_pages = "honour" maps nobody: set restriction_groups, '
                "restriction_groups_as_named, restriction_users or restriction_user_emails"
            )
        return self

    def location(self, settings: SourcePaths) -> str | None:
        return f"{self.url} ({self.deployment}; spaces {', '.join(self.spaces)})"


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class StoredSourceConfig(SourceConfig):
    """``[[sources]]`` of type upload or manual: where the files live, else the data dir."""

    model_config = ConfigDict(extra="forbid")

    path: Path | None = None

    def folder(self, settings: SourcePaths, kind: str) -> Path:
        if self.path is not None:
            return settings.resolve_path(self.path)
        return settings.resolved_data_dir() / kind / self.name

    def location(self, settings: SourcePaths) -> str | None:
        return str(self.folder(settings, self.type))


class UploadSourceConfig(StoredSourceConfig):
    """``[[sources]]`` of ``type = "upload"``: ``path`` defaults to ``<data dir>/upload/<name>``."""


class ManualSourceConfig(StoredSourceConfig):
    """``[[sources]]`` of ``type = "manual"``: ``path`` defaults to ``<data dir>/manual/<name>``."""


# -- validation by type --------------------------------------------------------------------

#: The built-in pack's source name and type: no ``[[sources]]`` table may take them.
VAULT_NAME = "vault"
VAULT_TYPE = "vault"

#: Source type -> the model its ``[[sources]]`` tables are validated with.
SOURCE_MODELS: dict[str, type[SourceConfig]] = {
    "filesystem": FilesystemSourceConfig,
    "git": GitSourceConfig,
    "confluence": ConfluenceSourceConfig,
    "upload": UploadSourceConfig,
    "manual": ManualSourceConfig,
}


def _table_name(item: object, number: int) -> str:
    name = item.get("name") if isinstance(item, Mapping) else getattr(item, "name", None)
    return f'[[sources]] "{name}"' if isinstance(name, str) and name else f"[[sources]] #{number}"


def source_config_model(source_type: object, table: str) -> type[SourceConfig]:
    """The model a ``[[sources]]`` table of ``source_type`` is validated with."""
    if source_type == VAULT_TYPE:
        raise ConfigError(
            f"{table}: type 'vault' is lore's built-in playbook pack, not a [[sources]] type; "
            "it is indexed unless [vault] enabled = false"
        )
    if not isinstance(source_type, str) or source_type not in SOURCE_MODELS:
        close = difflib.get_close_matches(str(source_type), list(SOURCE_MODELS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        valid = ", ".join(sorted(SOURCE_MODELS))
        raise ConfigError(f"{table}: unknown type {source_type!r}{hint}; valid types: {valid}")
    return SOURCE_MODELS[source_type]


def typed_source_config(item: object, number: int = 1) -> SourceConfig:
    """``item`` (a table from lore.toml, or a ``SourceConfig``) validated by the model of
    its type. ``number`` is its position, to name a table without a name."""
    table = _table_name(item, number)
    if isinstance(item, SourceConfig):
        if type(item) is not SourceConfig:
            return item  # already validated by its type's model
        item = item.model_dump(exclude_unset=True)
    if not isinstance(item, Mapping):
        raise ConfigError(f"{table}: must be a table of keys, not {type(item).__name__}")
    if item.get("name") == VAULT_NAME:
        raise ConfigError(
            f"{table}: the source name {VAULT_NAME!r} is reserved for lore's built-in playbook pack; "
            "give this source another name"
        )
    model = source_config_model(item.get("type", "filesystem"), table)
    unknown = [str(key) for key in item if key not in model.model_fields]
    if unknown:
        raise ConfigError("; ".join(unknown_key_message(key, model.model_fields, table) for key in unknown))
    try:
        return model.model_validate(item)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'table'}: {field_problem(error)}"
            for error in err.errors()
        )
        raise ConfigError(f"{table}: {problems}") from err
