"""lore's built-in playbook pack: diagnostic runbooks written for this project.

The Markdown files under ``playbooks/<area>/`` ship inside the package (package data),
so every install carries the pack of its own release. ``lore.sources.vault`` turns them
into documents.

``RELEASED`` is the date the pack's content was last reviewed as a whole. It is every
playbook's ``updated_at``, rather than the files' modification times, because those are
whatever the installer happened to write: the same release would look freshly written on
one machine and stale on another. Bump it whenever the playbooks change.
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib.resources import files
from importlib.resources.abc import Traversable

#: When this pack's content was last reviewed; the ``updated_at`` of every playbook.
RELEASED = datetime(2026, 12, 1, tzinfo=UTC)

#: The folder (inside the package) holding ``<area>/<name>.md``.
PLAYBOOKS_DIR = "playbooks"


def playbooks_root() -> Traversable:
    """The shipped playbooks, through ``importlib.resources`` so that the pack is found
    however lore is installed (a wheel, an editable checkout, a zip)."""
    return files(__name__).joinpath(PLAYBOOKS_DIR)
