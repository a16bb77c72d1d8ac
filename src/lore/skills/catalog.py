"""The skills of an index, as one caller may see them: list, get, export.

A ``SkillCatalog`` reads the index through the ``DocumentReader`` capability (the
documents and their chunks, as the documents reader of ``lore serve`` does) and shows
skills through ``KnowledgeSearch.show_stored``: the caller's ``Principal`` is checked
(no principal, nothing shown), every text passes the chain's screening and redaction,
and each call leaves an audit record (``skills_list``, ``skill_get``, ``skills_export``)
naming the caller and what was read. A document the caller may not read
(``lore.access.readable``, search's rule) is not among its skills, and asking for it by
name answers as for a name that does not exist.

Nothing is cached between calls: a skill is built from the index as it is now, so after
``lore sync`` an export or a served skill carries the current revision, and a deleted
or newly restricted runbook is gone for those who may not read it. Names are computed
over every skill of the index (``lore.skills.select.skill_names``), never per caller, so
one runbook has one name for everyone.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from lore.access import Principal, readable
from lore.backends.fallback import FallbackRetriever, LazyRetriever
from lore.errors import BackendUnavailableError, ConfigError, SkillExportError
from lore.models import Document
from lore.protocols import DocumentReader, KnowledgeRetriever
from lore.skills.build import GENERATOR, SKILL_FILE, Clean, Skill, build_skill
from lore.skills.select import SkillRules, is_skill, skill_names, skill_rules
from lore.tool.core import KnowledgeSearch

#: Where the documents come from: called per request, so a server whose backend is
#: reopened after an outage reads the new one. None: this index cannot list documents.
ReaderSource = Callable[[], DocumentReader | None]


def reader_of(search: KnowledgeSearch) -> ReaderSource:
    """The search's own index when it can list its documents (the SQLite and PostgreSQL
    backends can; Qdrant, Elasticsearch and Discovery Engine cannot). Behind ``[fallback]``
    that is the primary (opened on first use), and the fallback index while the primary
    is unreachable."""
    return lambda: _document_reader(search.retriever)


def _document_reader(retriever: KnowledgeRetriever) -> DocumentReader | None:
    if isinstance(retriever, FallbackRetriever):
        try:
            return _document_reader(retriever.primary)
        except BackendUnavailableError:
            # Degraded is not empty: the fallback index holds the same documents.
            return _document_reader(retriever.fallback)
    if isinstance(retriever, LazyRetriever):
        retriever = retriever.open()  # BackendUnavailableError while it is down
    return retriever if isinstance(retriever, DocumentReader) else None


class SkillCatalog:
    def __init__(
        self,
        search: KnowledgeSearch,
        reader: ReaderSource | None = None,
        *,
        rules: SkillRules | Callable[[], SkillRules] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._search = search
        self._reader = reader if reader is not None else reader_of(search)
        #: Read at every call when given as a function: a server's sources change while
        #: it runs (``/v1/sources``).
        policy = search.policy
        self._rules = rules if rules is not None else skill_rules(policy.skill_sources, policy.vault_skills)
        self._clock = clock

    # -- what any caller may ask --------------------------------------------------------

    async def listing(self, principal: Principal) -> list[Skill]:
        """Every skill ``principal`` may read, by name."""
        return await self._search.show_stored(
            "skills_list", principal, "", lambda clean: self._build(principal, None, clean)
        )

    async def get(self, principal: Principal, name: str) -> Skill | None:
        """The skill ``name`` when it exists and ``principal`` may read it, else None."""
        found = await self._search.show_stored(
            "skill_get", principal, name, lambda clean: self._build(principal, {name}, clean)
        )
        return found[0] if found else None

    async def names(self, uris: Iterable[str]) -> dict[str, str]:
        """uri -> skill name for those of ``uris`` that are skills (the alert path: the
        passages it names are already filtered by the caller's access)."""
        wanted = set(uris)
        if not wanted:
            return {}
        table = await asyncio.to_thread(self._names)
        return {uri: name for uri, name in table.items() if uri in wanted}

    async def export(self, principal: Principal, folder: Path) -> list[Skill]:
        """Write every skill ``principal`` may read under ``folder``, one folder each; a
        folder lore wrote before whose skill is gone is removed, anything else is kept."""
        skills = await self._search.show_stored(
            "skills_export", principal, str(folder), lambda clean: self._build(principal, None, clean)
        )
        await asyncio.to_thread(write_skills, skills, folder)
        return skills

    # -- building ----------------------------------------------------------------------

    def _documents(self) -> tuple[DocumentReader, list[Document]]:
        reader = self._reader()
        if reader is None:
            raise ConfigError(
                "this backend cannot list its documents, so it serves no skills "
                "(the sqlite and pgvector backends do)"
            )
        return reader, reader.list_documents()

    def _skill_documents(self) -> tuple[DocumentReader, list[Document], dict[str, str]]:
        reader, documents = self._documents()
        rules = self._rules() if callable(self._rules) else self._rules
        skills = [document for document in documents if is_skill(document, rules)]
        return reader, skills, skill_names(document.uri for document in skills)

    def _names(self) -> dict[str, str]:
        return self._skill_documents()[2]

    def _build(self, principal: Principal, only: set[str] | None, clean: Clean) -> list[Skill]:
        reader, documents, names = self._skill_documents()
        policy = self._search.policy
        now = self._clock()
        built: list[Skill] = []
        for document in sorted(documents, key=lambda d: names[d.uri]):
            name = names[document.uri]
            if only is not None and name not in only:
                continue
            if not readable(principal, document.access, document.tenant):
                continue
            found = reader.read_document(document.uri)
            if found is None:  # deleted since the listing
                continue
            full, chunks = found
            built.append(
                build_skill(name, full, chunks, clean, stale_after_days=policy.stale_after_days, now=now)
            )
        return built


def write_skills(skills: Sequence[Skill], folder: Path) -> None:
    """One folder per skill, written whole (files of an earlier export that are no longer
    part of it go); sibling folders lore wrote for skills now gone are removed."""
    try:
        _write(skills, folder)
    except OSError as err:
        raise SkillExportError(f"cannot write the skills to {folder}: {err}") from err


def _write(skills: Sequence[Skill], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    current = {skill.name for skill in skills}
    for child in sorted(folder.iterdir()):
        if child.is_dir() and child.name not in current and _written_by_lore(child):
            shutil.rmtree(child)
    for skill in skills:
        target = folder / skill.name
        if target.exists() and not _written_by_lore(target):
            raise SkillExportError(
                f"{target} exists and was not written by lore; move it or export elsewhere"
            )
    for skill in skills:
        target = folder / skill.name
        if target.exists():
            shutil.rmtree(target)
        for file in skill.files:
            path = target / file.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(file.data)


#: HolmesGPT's runbook catalog file, beside the skill folders (``--holmesgpt``).
HOLMES_CATALOG = "catalog.json"


def holmes_catalog(skills: Sequence[Skill]) -> str:
    """HolmesGPT's custom runbook catalog over exported skills: ``{"catalog": [{id,
    update_date, description, link}]}``, each ``link`` the skill's SKILL.md relative to the
    catalog, the description the one its front matter carries."""
    entries = [
        {
            "id": f"{skill.name}.md",
            "update_date": str(skill.frontmatter["metadata"]["updated-at"])[:10],
            "description": skill.description,
            "link": f"{skill.name}/{SKILL_FILE}",
        }
        for skill in skills
    ]
    return json.dumps({"catalog": entries}, indent=2, ensure_ascii=False) + "\n"


def write_holmes_catalog(skills: Sequence[Skill], folder: Path) -> None:
    try:
        (folder / HOLMES_CATALOG).write_text(holmes_catalog(skills), encoding="utf-8")
    except OSError as err:
        raise SkillExportError(f"cannot write {folder / HOLMES_CATALOG}: {err}") from err


def _written_by_lore(folder: Path) -> bool:
    import frontmatter  # only an export reads a folder back
    import yaml

    skill = folder / SKILL_FILE
    if not skill.is_file():
        return False
    try:
        metadata = frontmatter.loads(skill.read_text(encoding="utf-8")).metadata.get("metadata")
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return isinstance(metadata, dict) and metadata.get("generator") == GENERATOR
