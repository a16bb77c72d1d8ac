"""Who is asking: the principal a token (or the local CLI) acts as.

A caller is always a ``Principal``: never a name, never None. The service (``lore
serve``) turns a bearer token or a session into a ``Principal`` read from the token
store; the tool core and every backend filter by its groups and tenant. The one
principal that sees every tenant is ``LocalUser``: the person running the CLI, stdio MCP,
``lore mcp --http`` or an in-process adapter over their own index. Only those entry
points construct it (``local_user``); ``lore.web`` never does, and a test holds that.

Fail closed: ``access_filter`` raises ``AccessDeniedError`` for anything that is not a
``Principal``, so a mount, adapter or route that lost its caller answers nothing rather
than everything (mypy refuses the call first, since every parameter is typed
``Principal``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from lore.errors import AccessDeniedError


class Role(enum.StrEnum):
    """What a token may do; each role includes the ones before it."""

    VIEWER = "viewer"  # search, read documents and the tree
    EDITOR = "editor"  # + upload, edit, delete uploads and notes, trigger sync, keep alert suggestions
    ADMIN = "admin"  # + sources, events of the tenant

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


@dataclass(frozen=True)
class LocalUser(Principal):
    """The person at the keyboard over their own index: an admin of every tenant. Built
    by ``local_user`` in the CLI and local adapters only; a server never makes one."""


def local_user(name: str | None = None) -> LocalUser:
    """The local user, named for the audit log (the OS login name, or ``local``)."""
    return LocalUser(name=name or "local", role=Role.ADMIN)


#: The local user of the CLI and of stdio MCP when no login name is known.
LOCAL = local_user()


# -- what a document says about who may read it ------------------------------------------

#: The group of an access list that means "every viewer of the document's tenant"
#: (``visibility = "all-viewers"``). Not a valid group name in configuration.
EVERYONE = "*"

#: ``Document.access`` of a document every viewer of its tenant may read.
ALL_VIEWERS: frozenset[str] = frozenset({EVERYONE})

#: Every stored chunk carries one tenant term and a group term per entry of its
#: document's access list; a document whose access is unknown carries no group term, so
#: only an admin's filter (which asks for none) matches it. The prefixes keep the two
#: kinds apart; both live beside, never among, the label terms a document can set itself.
_TENANT = "tenant:"
_GROUP = "group:"


def tenant_term(tenant: str | None) -> str:
    """The term of a tenant; the default tenant (None) is the bare prefix, which no named
    tenant can produce (configured names are non-empty)."""
    return _TENANT + (tenant or "")


def group_term(group: str) -> str:
    return _GROUP + group


def access_terms(access: frozenset[str] | None, tenant: str | None) -> frozenset[str]:
    """The terms a backend stores with each chunk of a document, for ``AccessFilter``."""
    return frozenset({tenant_term(tenant), *(group_term(group) for group in access or ())})


@dataclass(frozen=True, slots=True)
class AccessFilter:
    """What one caller may read, applied inside every retrieval channel of a backend.

    A chunk passes when it belongs to ``tenant`` and, unless ``groups`` is None (an admin
    of the tenant, who also sees documents of unknown access), its document's access
    list names one of ``groups`` or ``EVERYONE``. ``retrieve(access=None)`` is the local
    admin view: every tenant, every document."""

    tenant: str | None = None
    groups: frozenset[str] | None = frozenset()

    @property
    def tenant_term(self) -> str:
        return tenant_term(self.tenant)

    @property
    def group_terms(self) -> frozenset[str] | None:
        """Terms of which a chunk must carry at least one; None: no such condition."""
        if self.groups is None:
            return None
        return frozenset(group_term(group) for group in {*self.groups, EVERYONE})

    def admits(self, terms: frozenset[str]) -> bool:
        """Whether a chunk carrying ``terms`` (``access_terms``) passes, for backends and
        tests that filter in Python."""
        if self.tenant_term not in terms:
            return False
        wanted = self.group_terms
        return wanted is None or not wanted.isdisjoint(terms)


def access_filter(principal: Principal) -> AccessFilter | None:
    """The filter for a caller: None (every tenant, every document) for the ``LocalUser``
    alone; a service principal is always filtered, an admin to its own tenant. Anything
    else (a bare name, None) is refused: ``AccessDeniedError``."""
    if isinstance(principal, LocalUser):
        return None
    if not isinstance(principal, Principal):
        raise AccessDeniedError(f"no principal for this call ({type(principal).__name__}); refused")
    return AccessFilter(principal.tenant, None if principal.is_admin else frozenset(principal.groups))


def principal_name(principal: Principal) -> str | None:
    """What the audit log records as the caller (None for a refused call that had none)."""
    return principal.name if isinstance(principal, Principal) else None


def tenant_of(principal: Principal) -> str | None:
    """The tenant an event of this caller is recorded under."""
    return principal.tenant if isinstance(principal, Principal) else None


def readable(principal: Principal, access: frozenset[str] | None, tenant: str | None) -> bool:
    """Whether ``principal`` may read a document with this access list and tenant: the
    same rule as search, for the service's document reads, tree, sync status and alert
    suggestions."""
    wanted = access_filter(principal)
    return wanted is None or wanted.admits(access_terms(access, tenant))


def same_tenant(principal: Principal, tenant: str | None) -> bool:
    """Whether something of ``tenant`` (a source, an event) is within ``principal``'s
    reach at all: the local user's always, anyone else's only in their own tenant."""
    if isinstance(principal, LocalUser):
        return True
    access_filter(principal)  # refuses what is not a principal
    return principal.tenant == tenant
