"""The documents tree and the document reader, from what the index holds.

The index stores chunks, not whole documents. Uploads and notes are read back from
their own Markdown files; any other document's Markdown is rebuilt from its chunks,
which are verbatim slices of the body in order, each opening with a little of the one
before (the chunker's overlap), so the overlap is cut where one chunk's end repeats as
the next one's start. Text before a document's first chunk (front matter) is not stored
and so not shown.

Every text taken from the index (titles, uris, folders, sections, chunks, Markdown)
passes ``clean``, which routes give as the tool's own screening and redaction
(``KnowledgeSearch.show_stored``): a parameter without a default, so no view can be
built without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from lore.models import SOURCE_LABEL, SOURCE_TYPE_LABEL, Chunk, Document, utc
from lore.text_blocks import merge_chunks as merge_chunks
from lore.web.managed import EDITABLE_TYPES

FOLDER_LABEL = "folder"

#: Screening and redaction of one text, as the tool's chain does it.
Clean = Callable[[str], str]


def age_days(updated_at: datetime, now: datetime | None = None) -> int:
    return max(0, ((now or datetime.now(UTC)) - utc(updated_at)).days)


def folder_of(document: Document) -> str:
    """The folder a document sits in: its ``folder`` label (filesystem sources), else the
    path of its uri below the source (``vault://lore/kubernetes/x.md`` -> ``kubernetes``)."""
    folder = document.labels.get(FOLDER_LABEL)
    if folder:
        return str(folder).strip("/")
    path = urlsplit(document.uri).path.strip("/")
    return path.rpartition("/")[0]


def summary(document: Document, stale_after_days: int, clean: Clean) -> dict[str, Any]:
    age = age_days(document.updated_at)
    return {
        "uri": clean(document.uri),
        "title": clean(document.title),
        "updated_at": utc(document.updated_at).isoformat(),
        "age_days": age,
        "stale": age > stale_after_days,
    }


def _folder_node(path: str) -> dict[str, Any]:
    return {"path": path, "count": 0, "documents": [], "folders": {}}


def build_tree(documents: Iterable[Document], stale_after_days: int, clean: Clean) -> dict[str, Any]:
    """The tree of the contract: source types, their sources, folders, documents; with counts."""
    types: dict[str, dict[str, Any]] = {}
    for document in sorted(documents, key=lambda d: d.uri):
        kind = str(document.labels.get(SOURCE_TYPE_LABEL, "unknown"))
        name = str(document.labels.get(SOURCE_LABEL, "unknown"))
        group = types.setdefault(kind, {"source_type": kind, "count": 0, "sources": {}})
        source = group["sources"].setdefault(
            name,
            {"name": name, "count": 0, "editable": kind in EDITABLE_TYPES, "folders": {}, "documents": []},
        )
        group["count"] += 1
        source["count"] += 1
        node = source
        path = ""
        for part in [clean(part) for part in folder_of(document).split("/") if part]:
            path = f"{path}/{part}" if path else part
            node = node["folders"].setdefault(part, _folder_node(path))
            node["count"] += 1
        node["documents"].append(summary(document, stale_after_days, clean))
    return {"source_types": [_freeze_type(group) for _, group in sorted(types.items())]}


def _freeze_folders(folders: dict[str, Any]) -> list[dict[str, Any]]:
    return [{**node, "folders": _freeze_folders(node["folders"])} for _, node in sorted(folders.items())]


def _freeze_type(group: dict[str, Any]) -> dict[str, Any]:
    sources = [
        {**source, "folders": _freeze_folders(source["folders"])}
        for _, source in sorted(group["sources"].items())
    ]
    return {**group, "sources": sources}


def document_view(
    document: Document, chunks: Sequence[Chunk], markdown: str | None, stale_after_days: int, clean: Clean
) -> dict[str, Any]:
    kind = str(document.labels.get(SOURCE_TYPE_LABEL, "unknown"))
    return {
        **summary(document, stale_after_days, clean),
        "source": str(document.labels.get(SOURCE_LABEL, "")),
        "source_type": kind,
        "revision": clean(document.revision),
        "editable": kind in EDITABLE_TYPES,
        "markdown": clean(markdown if markdown is not None else merge_chunks(chunks)),
        "chunks": [
            {"chunk_id": clean(chunk.id), "section": clean(chunk.section), "text": clean(chunk.text)}
            for chunk in chunks
        ],
    }
