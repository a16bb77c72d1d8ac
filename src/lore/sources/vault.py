"""The built-in playbook pack (``lore.vault``) as a knowledge source.

A ``FilesystemSource`` whose files come from the installed package instead of a folder:
listing and reading go through ``importlib.resources``; front matter, titles, labels,
batching and failure reporting are the filesystem source's own, so a playbook is indexed
exactly as the same file in a user's runbook folder would be, except for:

- **uri** ``vault://lore/<area>/<name>.md``: where it comes from, never an install path.
- **revision** the file's sha256 combined with the lore version. A new release therefore
  rewrites every playbook on the next sync, so each carries the new release's
  ``updated_at``; unchanged chunk texts still reuse their vectors (the embedding cache is
  keyed by text), so only changed playbooks cost embedding.
- **updated_at** ``lore.vault.RELEASED``, the pack's review date (see there why).
- **visibility** always all-viewers, and nothing about it is configurable: it is
  read-only content of lore itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

from lore import __version__
from lore.errors import SourceError
from lore.models import SOURCE_TYPE_LABEL, Document, SourceFailure, Visibility
from lore.source_tables import VAULT_NAME, VAULT_TYPE
from lore.sources.filesystem import FilesystemSource, decode_text
from lore.vault import RELEASED, playbooks_root

#: The source's name (its ``source`` label and sync-ledger key, reserved: no user source
#: may take it) and type.
VAULT_SOURCE_NAME = VAULT_NAME
VAULT_SOURCE_TYPE = VAULT_TYPE
#: The uri host: the pack's publisher, so a later third-party pack can sit beside it.
VAULT_PACK = "lore"
VAULT_URI_PREFIX = f"vault://{VAULT_PACK}/"


class VaultSource(FilesystemSource):
    """Every ``*.md`` under the pack, in sorted path order."""

    source_type = VAULT_SOURCE_TYPE
    incremental = False

    def __init__(
        self,
        pack: Traversable | None = None,
        *,
        name: str = VAULT_SOURCE_NAME,
        lore_version: str = __version__,
        released: datetime = RELEASED,
    ) -> None:
        self.pack = pack if pack is not None else playbooks_root()
        self.lore_version = lore_version
        self.released = released
        # ``root`` is only shown (repr, `lore sources`); every read goes through ``pack``.
        super().__init__(
            name,
            Path(str(self.pack)),
            visibility=Visibility.ALL_VIEWERS,
            include=("**/*.md",),
            labels={SOURCE_TYPE_LABEL: VAULT_SOURCE_TYPE},
        )

    def __repr__(self) -> str:
        return f"VaultSource({self.name!r}, lore {self.lore_version})"

    def uri_for(self, relative: str) -> str:
        return f"{VAULT_URI_PREFIX}{relative}"

    def revision_for(self, data: bytes) -> str:
        return f"{hashlib.sha256(data).hexdigest()}+lore-{self.lore_version}"

    def list_files(self) -> list[str]:
        """Relative POSIX paths of the playbooks, sorted. A missing pack is a broken
        install: SourceError, so that sync prunes nothing."""
        if not self.pack.is_dir():
            raise SourceError(f"source {self.name!r}: the playbook pack is missing from this install")
        found: list[str] = []
        pending: list[tuple[PurePosixPath, Traversable]] = [(PurePosixPath(), self.pack)]
        while pending:
            base, directory = pending.pop()
            try:
                entries = list(directory.iterdir())
            except OSError as err:
                raise SourceError(f"source {self.name!r}: cannot list {base}: {err}") from err
            for entry in entries:
                relative = base / entry.name
                if entry.is_dir():
                    pending.append((relative, entry))
                elif self._include.match_file(str(relative)):
                    found.append(str(relative))
        return sorted(found)

    def commit_times(self) -> Mapping[str, datetime]:
        # The pack's date is its release, never the history of the tree lore was installed from.
        return {}

    def _read(self, relative: str, committed: datetime | None = None) -> Document | SourceFailure:
        uri = self.uri_for(relative)
        try:
            data = self.pack.joinpath(*relative.split("/")).read_bytes()
        except OSError as err:
            return SourceFailure(uri, f"cannot read playbook: {err.strerror or err}")
        text = decode_text(uri, data)
        if isinstance(text, SourceFailure):
            return text
        document = self._document(relative, text, self.revision_for(data), self.released)
        # A playbook's own date keys (if one ever had any) must not beat the pack's date.
        return replace(document, updated_at=self.released)


def vault_source() -> VaultSource:
    """The pack shipped with this lore install."""
    return VaultSource()
