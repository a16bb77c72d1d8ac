"""Who is asking: the principal a token (or the local CLI) acts as.

A caller is always a ``Principal``: never a name, never None. The service (``lore
serve``) turns a bearer token or a session into a ``Principal`` read from the token
store; the tool core and every backend filter by its groups and tenant. The one
principal that sees every tenant is ``LocalUser``: the person running the CLI, stdio MCP,
``lore mcp --http`` or an in-process adapter over their own index. Only those entry
points construct it (``local_user``); ``lore.web`` never does, and a test holds that.

A principal may also carry ``user``: the verified identity (an IdP token's configured
claim, normalised by ``identity``) that an access list can name one person by
(``user_entry``), as a wiki page restricted to named users does. It is a term of its own
kind (``user:``), never a group: a group called ``user:alice@example.com`` grants nothing
of alice's, and a principal without a ``user`` matches no user entry.

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
    #: The person it is, as access lists name users (``identity``: an email address or
    #: the IdP's subject, lower case); None: it matches no user entry of an access list.
    user: str | None = None

    def __post_init__(self) -> None:
        if self.user is not None and identity(self.user) != self.user:
            raise AccessDeniedError("a principal's user must be a normalised identity (lore.access.identity)")

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

#: An access list entry naming one person rather than a group: ``user_entry(identity)``.
#: Configured group names may not start with it (``lore.source_tables``).
USER_ENTRY = "user:"

#: The longest identity a principal or access list may carry (an email address's limit).
_IDENTITY_MAX = 320


def identity(value: object) -> str | None:
    """``value`` as the identity access lists and principals compare: in lower case
    (email addresses are compared without case in practice, and an IdP's and a wiki's
    spelling may differ). None for anything that cannot be one: not a string, empty,
    longer than 320 characters, not ASCII, or holding whitespace or control characters -
    so it matches nothing. Non-ASCII is refused because case folding and look-alike
    letters could make two different names one (the Kelvin sign lowers to ``k``)."""
    if not isinstance(value, str) or not value.isascii():
        return None
    text = value.lower()
    if not text or len(text) > _IDENTITY_MAX or any(c.isspace() or not c.isprintable() for c in text):
        return None
    return text


def user_entry(person: str) -> str:
    """The access-list entry that lets ``person`` (a normalised ``identity``) read."""
    return USER_ENTRY + person


#: Every stored chunk carries one tenant term and a group term per entry of its
#: document's access list (a user term per user entry); a document whose access is
#: unknown carries no group term, so only an admin's filter (which asks for none) matches
#: it. The prefixes keep the kinds apart; all live beside, never among, the label terms a
#: document can set itself.
_TENANT = "tenant:"
_GROUP = "group:"
_USER = "user:"


def tenant_term(tenant: str | None) -> str:
    """The term of a tenant; the default tenant (None) is the bare prefix, which no named
    tenant can produce (configured names are non-empty)."""
    return _TENANT + (tenant or "")


def group_term(group: str) -> str:
    return _GROUP + group


def user_term(person: str) -> str:
    return _USER + person


def _entry_term(entry: str) -> str | None:
    """A user entry's user term (None when its identity is malformed: it grants nobody),
    any other entry's group term."""
    if entry.startswith(USER_ENTRY):
        person = identity(entry[len(USER_ENTRY) :])
        return user_term(person) if person is not None else None
    return group_term(entry)


def access_terms(access: frozenset[str] | None, tenant: str | None) -> frozenset[str]:
    """The terms a backend stores with each chunk of a document, for ``AccessFilter``."""
    entries = (_entry_term(entry) for entry in access or ())
    return frozenset({tenant_term(tenant), *(term for term in entries if term is not None)})


@dataclass(frozen=True, slots=True)
class AccessFilter:
    """What one caller may read, applied inside every retrieval channel of a backend.

    A chunk passes when it belongs to ``tenant`` and, unless ``groups`` is None (an admin
    of the tenant, who also sees documents of unknown access), its document's access
    list names one of ``groups``, ``EVERYONE`` or (as a user entry) ``user``.
    ``retrieve(access=None)`` is the local admin view: every tenant, every document."""

    tenant: str | None = None
    groups: frozenset[str] | None = frozenset()
    #: The caller's identity (``Principal.user``); None: no user entry matches.
    user: str | None = None

    @property
    def tenant_term(self) -> str:
        return tenant_term(self.tenant)

    @property
    def group_terms(self) -> frozenset[str] | None:
        """Terms of which a chunk must carry at least one; None: no such condition."""
        if self.groups is None:
            return None
        terms = {group_term(group) for group in {*self.groups, EVERYONE}}
        if self.user is not None:
            terms.add(user_term(self.user))
        return frozenset(terms)

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
    if principal.is_admin:
        return AccessFilter(principal.tenant, None)
    return AccessFilter(principal.tenant, frozenset(principal.groups), principal.user)


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
