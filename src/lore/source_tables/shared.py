"""The keys every ``[[sources]]`` table shares (``SourceConfig``) and the helpers each
type's model uses: an ``every`` cadence, access groups, the messages of a refused key.

Each type's model lives in a module of its own beside this one (``filesystem``, ``git``,
``confluence``, ``stored``), imported only when a table of that type is validated
(``lore.source_tables.typed_source_config``): loading settings builds the models of the
types it names and no other.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

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
    # Here, not at the top: loading settings reads no access list unless a table has one.
    from lore.access import USER_ENTRY

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
        from lore.access import USER_ENTRY

        raise ValueError(
            f"{bad[0]!r} is not a group name (no spaces, not '*', not starting with {USER_ENTRY!r}; "
            'every viewer is visibility = "all-viewers")'
        )
    return groups


class SourceConfig(BaseModel):
    """One ``[[sources]]`` table: the keys every source type shares.

    The rest of a table belongs to its type, which declares a model of its own (a
    subclass in a module beside this one, e.g. ``FilesystemSourceConfig``; the types are
    ``lore.source_tables.SOURCE_TYPES``). Loading settings replaces each table by that
    model, which refuses keys it does not declare:
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
