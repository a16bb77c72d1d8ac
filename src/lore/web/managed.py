"""Sources the service manages (``/v1/sources``), beside the ones lore.toml declares.

They are kept in ``<data dir>/sources.json`` (0600: a table may hold a secret such as an
access token), each validated by its type's own model exactly like a ``[[sources]]``
table. lore.toml stays the operator's file: the API never rewrites it, and its sources
are listed read-only. Only types that read nothing from the server's own disk may be
added over HTTP (a filesystem source would let an admin token index any file the server
can read). Secret fields are write-only: listings say whether one is set, never what.

With no upload or manual source configured, the service adds ``uploads`` and ``notes``
(visible to all viewers), so the page can upload and write notes out of the box.

A table added or changed over the API passes, at ``POST``/``PATCH``, the checks a sync
would make when it builds the source (``build_source``: git's URL rules, Confluence's),
and the API's own (``check_api_table``): no key that names a server path (``token_file``,
``ssh_key_file``, a manual source's ``path``) or an environment variable (``token_env``):
credentials arrive as values (``token``), stored here and never shown; no
``allow_private_hosts`` (the operator's decision, in lore.toml); a Confluence site, as a
git remote, not on a loopback, link-local or unspecified address; a name without ``..``.
A table that fails its checks later (a file written by an older version, a host that
now resolves elsewhere) is listed with its error and left out, never breaking the others.
"""

from __future__ import annotations

import json
import re
import threading
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from lore.config import LoreSettings, SourceConfig
from lore.errors import ConfigError
from lore.models import Visibility
from lore.sources import build_source, source_config_model, source_configs, typed_source_config
from lore.sources.git_transport import refuse_private_host
from lore.sources.stored import write_atomic

SOURCES_FILE = "sources.json"
#: Types an admin may add over HTTP: none of them reads a path on the server.
MANAGEABLE_TYPES = frozenset({"upload", "manual", "git", "confluence"})
DEFAULT_UPLOAD_SOURCE = "uploads"
DEFAULT_NOTES_SOURCE = "notes"
EDITABLE_TYPES = frozenset({"upload", "manual"})
#: A source name over the API: letters, digits, ``_ . -``, not starting with ``.`` or
#: ``-``, never ``..`` (a name becomes a folder's name and a URI's host).
API_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
#: Keys only lore.toml may set: an environment variable's name, and the decision to let a
#: source reach this machine or its private links.
_OPERATOR_KEYS = frozenset({"allow_private_hosts"})


def _names_a_path(annotation: object) -> bool:
    if annotation is Path:
        return True
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and Path in typing.get_args(annotation)


def check_api_table(table: Mapping[str, Any]) -> None:
    """``ConfigError`` for what a table may not say over the API (see the module note)."""
    name = table.get("name")
    if isinstance(name, str) and (not API_NAME.match(name) or ".." in name):
        raise ConfigError(
            f"source name {name!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a "
            "letter, digit or '_', without '..'"
        )
    model = source_config_model(str(table.get("type", "filesystem")), "source")
    for key in table:
        field = model.model_fields.get(str(key))
        if str(key).endswith("_env") or (field is not None and _names_a_path(field.annotation)):
            hint = "; send the token itself as 'token' (write-only)" if "token" in str(key) else ""
            raise ConfigError(
                f"{key!r} names a file or variable of the server and is refused over the API{hint}"
            )
        if key in _OPERATOR_KEYS:
            raise ConfigError(f"{key!r} may be set only in lore.toml, by the server's operator")
    url = table.get("url")
    if table.get("type") == "confluence" and isinstance(url, str):
        refuse_private_host(url, urlsplit(url.strip()).hostname or "")


class ManagedSources:
    def __init__(self, settings: LoreSettings) -> None:
        self.settings = settings
        self.path = settings.resolved_data_dir() / SOURCES_FILE
        self._lock = threading.Lock()

    def _tables(self) -> list[dict[str, Any]]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read {self.path}: {err}") from err
        tables = raw.get("sources") if isinstance(raw, dict) else None
        if not isinstance(tables, list):
            raise ConfigError(f'{self.path}: expected {{"sources": [...]}}')
        return [table for table in tables if isinstance(table, dict)]

    def managed(self) -> list[SourceConfig]:
        return [config for config in self._checked() if isinstance(config, SourceConfig)]

    def broken(self) -> list[tuple[str, str, str | None]]:
        """Tables of the file that fail their checks or do not build, as (name, why,
        tenant): listed with why, never synced (``IndexWriter.built_sources`` leaves them
        out)."""
        found: list[tuple[str, str, str | None]] = []
        for checked in self._checked():
            if isinstance(checked, tuple):
                found.append(checked)
                continue
            try:
                build_source(checked, self.settings)
            except ConfigError as err:
                found.append((checked.name, str(err), checked.tenant))
        return found

    def _checked(self) -> list[SourceConfig | tuple[str, str, str | None]]:
        found: list[SourceConfig | tuple[str, str, str | None]] = []
        for number, table in enumerate(self._tables(), start=1):
            try:
                check_api_table(table)
                found.append(typed_source_config(table, number))
            except ConfigError as err:
                tenant = table.get("tenant")
                name = str(table.get("name") or f"#{number}")
                found.append((name, str(err), tenant if isinstance(tenant, str) else None))
        return found

    def all(self) -> list[tuple[SourceConfig, str]]:
        """Every source the service syncs, with where it comes from: ``lore.toml``,
        ``service`` (this file) or ``default``."""
        found = [(config, "lore.toml") for config in self.settings.sources]
        # the built-in playbook pack, unless ``[vault] enabled = false``
        pack = source_configs(self.settings)[len(self.settings.sources) :]
        found += [(config, "built-in") for config in pack]
        found += [(config, "service") for config in self.managed()]
        types = {config.type for config, _ in found}
        names = {config.name for config, _ in found}
        for kind, name in (("upload", DEFAULT_UPLOAD_SOURCE), ("manual", DEFAULT_NOTES_SOURCE)):
            if kind not in types and name not in names:
                table = {"name": name, "type": kind, "visibility": Visibility.ALL_VIEWERS.value}
                found.append((typed_source_config(table), "default"))
        return found

    def add(self, table: Mapping[str, Any]) -> SourceConfig:
        with self._lock:
            config = typed_source_config(dict(table))
            if config.type not in MANAGEABLE_TYPES:
                allowed = ", ".join(sorted(MANAGEABLE_TYPES))
                raise PermissionError(
                    f"{config.type} sources read the server's own disk; declare them in lore.toml "
                    f"(sources managed here: {allowed})"
                )
            self._check_buildable(table, config)
            if any(existing.name == config.name for existing, _ in self.all()):
                raise ValueError(f"a source named {config.name!r} exists")
            self._save([*self._tables(), dict(table)])
            return config

    def update(self, name: str, changes: Mapping[str, Any]) -> SourceConfig:
        with self._lock:
            tables = self._tables()
            for number, table in enumerate(tables):
                if table.get("name") == name:
                    if ("name" in changes and changes["name"] != name) or (
                        "type" in changes and changes["type"] != table.get("type")
                    ):
                        raise ValueError("a source's name and type cannot change; add a new source instead")
                    merged = {**table, **changes}
                    config = typed_source_config(merged, number + 1)
                    self._check_buildable(merged, config)
                    tables[number] = merged
                    self._save(tables)
                    return config
        raise KeyError(name)

    def remove(self, name: str) -> None:
        with self._lock:
            tables = self._tables()
            kept = [table for table in tables if table.get("name") != name]
            if len(kept) == len(tables):
                raise KeyError(name)
            self._save(kept)

    def _check_buildable(self, table: Mapping[str, Any], config: SourceConfig) -> None:
        """The API's rules, then what a sync checks when it builds the source."""
        check_api_table(table)
        build_source(config, self.settings)

    def _save(self, tables: list[dict[str, Any]]) -> None:
        write_atomic(self.path, json.dumps({"sources": tables}, indent=2).encode("utf-8") + b"\n", mode=0o600)


def public_view(config: SourceConfig, origin: str, settings: LoreSettings) -> dict[str, Any]:
    """A source as ``GET /v1/sources`` shows it: secrets as ``{"set": true}``, never their value."""
    shown: dict[str, Any] = {}
    for key, value in config.model_dump(mode="python").items():
        if isinstance(value, SecretStr):
            shown[key] = {"set": bool(value.get_secret_value())}
        elif isinstance(value, Path):
            shown[key] = str(value)
        else:
            shown[key] = value
    return {
        **shown,
        "origin": origin,
        "managed": origin == "service",
        "editable": config.type in EDITABLE_TYPES,
        "location": config.location(settings),
    }
