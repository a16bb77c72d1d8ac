"""psycopg's errors as lore's: the one place where a ``psycopg.Error`` becomes a ``LoreError``.

Every part of the pgvector backend that talks to PostgreSQL goes through ``translated``,
naming its own class and what it was doing; the message is one line,
``"<what>: <the driver's reason>"`` (stripped: libpq ends its reasons with a newline), and
the cause is chained. Which class comes out is decided here, by these rules in this order:

- ``locked``, when the caller gives it: a lock waited for past ``lock_timeout``
  (``LockNotAvailable``, SQLSTATE 55P03) is an ``IndexLockedError`` with that message
  (the write turn of ``lore serve`` replicas: a 503 with ``Retry-After``, not an outage);
- ``denied``, when given: a missing privilege (``InsufficientPrivilege``) is a
  ``ConfigError`` saying what to ask an administrator for (creating the schema);
- ``unavailable``, when given: a server that cannot serve is a
  ``BackendUnavailableError`` (which the keyword fallback and ``/readyz`` act on) while
  a statement's own failure stays the caller's class. "Cannot serve" is an
  ``OperationalError`` with no SQLSTATE (the connection itself failed or was lost) or one
  of classes 08 (connection), 53 (insufficient resources), 57 (operator intervention,
  such as a shutdown) and 58 (system error). psycopg files errors of one row under
  ``OperationalError`` too (54000, an index row too large): those fail one document, not
  the whole sync;
- everything else: the caller's class.

So each site says its rule in its ``with`` line:

- the backend's pooled connections (``backend.py``): the caller's class (``IndexingError``
  writing, ``RetrievalError`` searching), ``unavailable`` for a server that cannot serve;
  no connection from the pool at all is ``BackendUnavailableError`` "is unreachable";
- the backend's first connection, which creates the schema: ``IndexingError``,
  ``unavailable`` and ``denied``;
- the replicas' shared state (``replicas.py``): ``BackendUnavailableError`` for everything
  (every replica needs it), ``locked`` on the write turn;
- the event store (``events.py``): ``IndexingError`` for everything, an unreachable server
  included, because the event recorder counts an ``IndexingError`` as a dropped event
  (``lore events`` shows it) rather than failing the search that recorded it.

A caller may still catch a raw ``psycopg.Error`` to clean up before it is translated
(closing a broken connection, giving a pool back) or to decide something without raising
(a lease not taken), but raises it on unchanged:
``tests/backends/test_pgvector_errors.py`` holds that no other module turns one into a
``LoreError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lore.errors import (
    BackendUnavailableError,
    ConfigError,
    IndexLockedError,
    LoreError,
    MissingExtraError,
)

try:
    import psycopg
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

#: SQLSTATE classes of a server that cannot serve: connection (08), insufficient resources
#: (53), operator intervention such as a shutdown (57), system errors (58).
UNAVAILABLE_CLASSES = frozenset({"08", "53", "57", "58"})

#: What ``denied`` adds: the two ways out of a missing privilege.
DENIED_ADVICE = "ask an administrator to run CREATE EXTENSION vector, or grant CREATE"


def server_trouble(err: psycopg.Error) -> bool:
    """Whether the error means the server cannot serve, not that a statement failed."""
    if not isinstance(err, psycopg.OperationalError):
        return False
    state = err.sqlstate
    return state is None or state[:2] in UNAVAILABLE_CLASSES


@contextmanager
def translated(
    failure: type[LoreError],
    what: str,
    *,
    unavailable: str | None = None,
    locked: str | None = None,
    denied: str | None = None,
) -> Iterator[None]:
    """A ``psycopg.Error`` raised in the block as ``failure("<what>: <reason>")``, or (see
    the module's rules) as ``BackendUnavailableError("<unavailable>: <reason>")``,
    ``IndexLockedError(locked)`` or ``ConfigError("<denied> (<reason>); <advice>")``.
    Anything else (a ``LoreError`` raised inside, a bug) passes through untouched."""
    try:
        yield
    except psycopg.Error as err:
        if locked is not None and isinstance(err, psycopg.errors.LockNotAvailable):
            raise IndexLockedError(locked) from err
        if denied is not None and isinstance(err, psycopg.errors.InsufficientPrivilege):
            raise ConfigError(f"{denied} ({err}); {DENIED_ADVICE}") from err
        if unavailable is not None and server_trouble(err):
            raise BackendUnavailableError(f"{unavailable}: {err}".strip()) from err
        raise failure(f"{what}: {err}".strip()) from err
