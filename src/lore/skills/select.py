"""Which indexed documents are skills, and the name each one is served under.

Decided, never guessed: a document is a skill when

1. its front matter says ``skill: true`` (``skill: false`` keeps it out, whatever else
   holds), or lists ``alerts:`` or ``symptoms:`` (a procedure with a known trigger);
2. or its source's ``skills`` key marks it: ``true`` for every document of the source,
   or gitignore-style globs over its path below the source (pathspec, as the sources'
   own ``include``/``exclude``);
3. a playbook of the built-in pack is a skill while ``[vault] skills`` is true (the
   default), since every playbook names the alerts it answers.

Front matter reaches the index as labels (``lore.sources.filesystem.front_matter_labels``),
so the decision reads the document's labels and uri alone: the same answer for an
export, ``skills/list`` and the alert path.

Names follow the Agent Skills rules (lower-case letters, digits and single hyphens, at
most 64 characters) and come from the document's uri, its source and path
(``file://runbooks/kubernetes/etcd-no-leader.md`` -> ``runbooks-kubernetes-etcd-no-leader``),
so a name is stable across runs and across unrelated edits. A name cut to fit, and every
name two skills of the index would share, ends in eight hex digits of the uri's SHA-256:
still unique, still stable while the colliding documents stay.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from lore.models import LABEL_VALUE_SEPARATOR, SOURCE_LABEL, Document
from lore.source_tables import VAULT_NAME, SourceConfig

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

#: Front-matter keys (labels) that make a document a procedure.
TRIGGER_LABELS = ("alerts", "symptoms")
SKILL_LABEL = "skill"
#: The Agent Skills specification's limit on ``name``.
MAX_NAME = 64
_HASH = 8
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_NOT_NAME = re.compile(r"[^a-z0-9]+")
NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


@dataclass(frozen=True)
class SkillRules:
    """The configuration's part of the decision: per source, every document (True) or the
    globs' spec; and whether the pack's playbooks are skills."""

    sources: Mapping[str, bool | GitIgnoreSpec] = field(default_factory=dict)
    vault: bool = True


def skill_rules(sources: Iterable[SourceConfig], vault_skills: bool) -> SkillRules:
    """The rules the ``[[sources]]`` tables (``sources``: the settings' own, or every table
    a server syncs, its API-managed ones included) and ``[vault] skills`` give."""
    marks: dict[str, bool | GitIgnoreSpec] = {}
    for source in sources:
        marked = getattr(source, "skills", False)
        if marked is True:
            marks[source.name] = True
        elif isinstance(marked, list) and marked:
            # Here, not at the top: every server builds these rules at start, and only a
            # source with globs needs the matcher (lore.sources.filesystem defers it alike).
            from pathspec import GitIgnoreSpec

            marks[source.name] = GitIgnoreSpec.from_lines(marked)
    return SkillRules(sources=marks, vault=vault_skills)


def label_values(labels: Mapping[str, str], key: str) -> list[str]:
    """A multi-valued label's values (front-matter lists are stored joined)."""
    value = labels.get(key)
    if value is None:
        return []
    return [part.strip() for part in str(value).split(LABEL_VALUE_SEPARATOR) if part.strip()]


def relative_path(uri: str) -> str:
    """The document's path below its source (``kubernetes/etcd-no-leader.md``)."""
    return unquote(urlsplit(uri).path).lstrip("/")


def is_skill(document: Document, rules: SkillRules) -> bool:
    labels = document.labels
    declared = str(labels.get(SKILL_LABEL, "")).strip().lower()
    if declared in _FALSE:
        return False
    source = str(labels.get(SOURCE_LABEL, ""))
    if source == VAULT_NAME:
        return rules.vault
    if declared in _TRUE or any(label_values(labels, key) for key in TRIGGER_LABELS):
        return True
    marked = rules.sources.get(source)
    if marked is None or marked is False:
        return False
    if marked is True:
        return True
    return bool(marked.match_file(relative_path(document.uri)))


def _digest(uri: str) -> str:
    return hashlib.sha256(uri.encode("utf-8")).hexdigest()[:_HASH]


def base_name(uri: str) -> str:
    """The name a uri gives before collisions: its host and path, suffix dropped, as
    lower-case words joined by single hyphens; cut (with the uri's digest) to fit."""
    parts = urlsplit(uri)
    path = unquote(parts.path)
    stem, dot, suffix = path.rpartition(".")
    if dot and "/" not in suffix:
        path = stem
    name = _NOT_NAME.sub("-", f"{parts.netloc}/{path}".lower()).strip("-") or "skill"
    if len(name) > MAX_NAME:
        name = name[: MAX_NAME - _HASH - 1].rstrip("-") + "-" + _digest(uri)
    return name


def skill_names(uris: Iterable[str]) -> dict[str, str]:
    """uri -> name for every skill of the index: unique, stable for the same set."""
    wanted = sorted(set(uris))
    bases = {uri: base_name(uri) for uri in wanted}
    counts: dict[str, int] = {}
    for name in bases.values():
        counts[name] = counts.get(name, 0) + 1
    names: dict[str, str] = {}
    for uri, name in bases.items():
        if counts[name] > 1:
            name = name[: MAX_NAME - _HASH - 1].rstrip("-") + "-" + _digest(uri)
        names[uri] = name
    return names
