"""Who is asking: the principal a token (or the local CLI) acts as.

The service (``lore serve``) turns a bearer token or a session cookie into a
``Principal``; the tool core and every backend filter by its groups and tenant. The
local CLI and stdio MCP act as ``LOCAL`` (one user on their own machine, an admin of
their own index)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Role(enum.StrEnum):
    """What a token may do; each role includes the ones before it."""

    VIEWER = "viewer"  # search, read documents and the tree
    EDITOR = "editor"  # + upload, edit, delete uploads and notes, trigger sync
    ADMIN = "admin"  # + sources, identities, tokens

    def allows(self, needed: Role) -> bool:
        order = (Role.VIEWER, Role.EDITOR, Role.ADMIN)
        return order.index(self) >= order.index(needed)


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    #: The groups this principal belongs to; a document is readable when its access
    #: list shares a group with these (or the document is open to all viewers).
    groups: frozenset[str] = field(default_factory=frozenset)
    #: The tenant a token is bound to; None is the index's default tenant.
    tenant: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN


#: The local user of the CLI and of stdio MCP: their own index, no token.
LOCAL = Principal(name="local", role=Role.ADMIN)
