"""Who may read a source's documents, and which tenant they belong to: what sync stamps on
every document before it is chunked, and how it decides that a source may be indexed.

Fail-closed, per the brief: a source that cannot report who may read it is refused, and
a document whose access is unknown is shown to no one but admins.

- ``visibility = "all-viewers"``: every viewer of the source's tenant (``ALL_VIEWERS``).
- ``access = ["sre", "dba"]`` (``visibility = "restricted"`` is then implied): the
  members of those groups.
- ``visibility = "restricted"`` without ``access``: indexed only when the source reports
  each document's readers itself (``AccessReporting``); a document it reports nothing for
  stays unknown. Otherwise the source is skipped and the sync report says so.
- A document's own ``access`` (set by a source that knows it, e.g. a wiki's page
  restrictions) wins over the configured default; its ``tenant`` is always the
  source's: a document cannot move itself into another tenant.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from lore.access import ALL_VIEWERS
from lore.models import Document, SourceItem, Visibility
from lore.protocols import AccessReporting, KnowledgeSource


@dataclass(frozen=True, slots=True)
class SourceScope:
    """A source's configured access list (None: not configured) and tenant."""

    access: frozenset[str] | None = None
    tenant: str | None = None


class ScopedSource:
    """A source with the ``access`` and ``tenant`` of its ``[[sources]]`` table, as
    ``build_source`` returns it when the table sets either. Everything else is the
    wrapped source's (optional capabilities included)."""

    def __init__(self, inner: KnowledgeSource, scope: SourceScope) -> None:
        self.inner = inner
        self.scope = scope

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def source_type(self) -> str:
        return self.inner.source_type

    @property
    def visibility(self) -> Visibility | None:
        return self.inner.visibility

    @property
    def incremental(self) -> bool:
        return self.inner.incremental

    def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        return self.inner.documents(since=since)

    def resume_token(self) -> str | None:
        return self.inner.resume_token()

    def __getattr__(self, name: str) -> object:
        # Optional capabilities (``preflight``, ``reports_access``, a type's own methods)
        # are the wrapped source's; only attributes not defined here arrive here.
        if name == "inner":  # not yet set: during unpickling or a failed __init__
            raise AttributeError(name)
        return getattr(self.inner, name)


def scope_of(source: KnowledgeSource) -> SourceScope:
    return source.scope if isinstance(source, ScopedSource) else SourceScope()


def default_access(source: KnowledgeSource) -> frozenset[str] | None:
    """The access of a document of ``source`` that reports none of its own."""
    if source.visibility == Visibility.ALL_VIEWERS:
        return ALL_VIEWERS
    if source.visibility == Visibility.RESTRICTED:
        return scope_of(source).access
    return None


def indexable(source: KnowledgeSource) -> bool:
    """Whether sync may index ``source``: it says who may read its documents, by its
    visibility, a configured access list, or per document."""
    if default_access(source) is not None:
        return True
    reports = isinstance(source, AccessReporting) and source.reports_access
    return source.visibility == Visibility.RESTRICTED and reports


def scoped(document: Document, source: KnowledgeSource) -> Document:
    """``document`` with the access and tenant it is indexed with."""
    access = document.access if document.access is not None else default_access(source)
    return replace(document, access=access, tenant=scope_of(source).tenant)
