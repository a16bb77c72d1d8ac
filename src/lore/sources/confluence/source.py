"""Confluence spaces (Cloud or Data Center) as a knowledge source.

Every listing first enumerates the current pages of each configured space without
bodies, and reads the view restrictions of each of them and of their ancestors. With
``restricted_pages = "skip"`` a page restricted itself or through any ancestor is not
indexed, so one that gains a restriction is tombstoned by the next sync (time to forget).
With ``"honour"`` it is indexed for its readers: Confluence lets a user view a page who
passes every restricted level (the page and each ancestor, each level a union of users
and groups), so lore keeps the readers named at every level - the intersection of the
levels' mapped entries, then of the source's ``access`` when it has one (the space's
readers). That set never holds anyone Confluence would refuse; it can miss a reader named
one way at one level and another way at the next (a user at one, their group at the
other), since lore does not know group membership. A page whose set is empty, or whose
restrictions (or an ancestor's) cannot be read, is not indexed. The readers' digest is
part of the page's revision and of the resume token, so a change of restrictions alone is
picked up by the next incremental sync, and a reader removed loses the page then.

Bodies are fetched only for pages that changed since the resume token: by CQL
(``lastmodified >= ...``) in bulk, then one by one for any the search missed (CQL is a
search index and may lag, and a change of restrictions alone is not a modification). The
first listing, or one after the spaces changed, fetches every body through the space's
page listing.

The resume token records each indexed page's space, version and readers' digest, so
changes are found by comparing them (not by trusting CQL's minute-granular, time-zone-local
dates), and tombstones go to pages that were indexed and are now deleted, archived, moved
out of the configured spaces, or restricted beyond every reader lore can name. Tombstones
are yielded only after the whole enumeration succeeded; any failure before raises
SourceError, so sync keeps what it had.

Limitation: a page's ``path`` label is refreshed when the page itself changes, not when an
ancestor is renamed (the revision is the page's version, which a rename above it keeps).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from lore.access import identity, user_entry
from lore.config import LoreSettings
from lore.errors import ConfigError, ConfluenceHTTPError, MissingExtraError, PermissionRefusal, SourceError
from lore.models import LABEL_VALUE_SEPARATOR, Document, SourceFailure, SourceItem, Tombstone, Visibility
from lore.source_tables import bad_group_name
from lore.sources.confluence.api import DENIED, ConfluenceApi, PageBody, PageMeta, ReadRestriction
from lore.sources.confluence.client import ConfluenceClient
from lore.sources.confluence.config import ConfluenceSourceConfig
from lore.sources.confluence.storage import storage_to_markdown
from lore.sources.git_transport import read_token

T = TypeVar("T")
#: Labels every page carries besides the source's own.
SPACE_LABEL = "space"
PATH_LABEL = "path"
TAGS_LABEL = "tags"
PATH_SEPARATOR = " / "
#: CQL compares dates in the calling user's time zone, to the minute: searching from a
#: day before the last listing covers every offset (UTC-12 to UTC+14). Pages found again
#: are dropped by version, so the overlap costs bytes, not re-embedding.
CQL_OVERLAP = timedelta(days=1)
_TOKEN_VERSION = 1


@dataclass(frozen=True, slots=True)
class _Token:
    site: str
    spaces: tuple[str, ...]
    listed_at: datetime
    #: page id -> (space key, version indexed, readers' digest: "" when unrestricted)
    pages: dict[str, tuple[str, int, str]]

    def dump(self) -> str:
        pages = {key: list(value) for key, value in self.pages.items()}
        raw = {"v": _TOKEN_VERSION, "site": self.site, "spaces": list(self.spaces),
               "at": self.listed_at.isoformat(), "pages": pages}
        return json.dumps(raw, separators=(",", ":"), sort_keys=True)

    @classmethod
    def load(cls, text: str | None) -> _Token | None:
        """None for no token or one this source did not write (a full listing follows)."""
        if not text:
            return None
        try:
            raw = json.loads(text)
            if raw.get("v") != _TOKEN_VERSION:
                return None
            pages = {
                str(key): (str(value[0]), int(value[1]), str(value[2]) if len(value) > 2 else "")
                for key, value in raw["pages"].items()
            }
            return cls(str(raw["site"]), tuple(raw["spaces"]), datetime.fromisoformat(raw["at"]), pages)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return None


class ConfluenceSource:
    source_type = "confluence"
    incremental = True

    def __init__(self, config: ConfluenceSourceConfig, visibility: Visibility | None) -> None:
        self.config = config
        self.name = config.name
        self.visibility = visibility
        self.labels = dict(config.labels)
        self._token: str | None = None
        self._complete = False
        #: Requests the last listing made (the benchmark reports it).
        self.requests = 0

    def __repr__(self) -> str:
        return f"ConfluenceSource({self.name!r}, {self.config.url!r})"

    def uri_for(self, space: str, page_id: str) -> str:
        return f"confluence://{space}/{page_id}"

    def resume_token(self) -> str | None:
        return self._token

    @property
    def reports_access(self) -> bool:
        """Whether restricted pages are indexed with their own readers (``honour``)."""
        return self.config.restricted_pages == "honour"

    def listing_was_complete(self) -> bool:
        """True after a listing without a usable token (or after ``spaces`` changed): it
        yielded every indexable page, so what it lacked may be pruned (deleted or restricted
        pages an index built before the token still holds). False after an incremental one."""
        return self._complete

    def preflight(self) -> None:
        """The token must be readable and the converter installed before the index opens."""
        read_token(self.config.token_env, self.config.token_file, self.name, self.config.token)
        for module, package in (("bs4", "beautifulsoup4"), ("markdownify", "markdownify")):
            try:
                __import__(module)
            except ImportError as err:
                raise MissingExtraError("confluence", package) from err

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        self._token = None
        self._complete = False
        started = datetime.now(UTC)
        token = read_token(self.config.token_env, self.config.token_file, self.name, self.config.token)
        if token is None:
            raise ConfigError(f"source {self.name!r}: no token (set token_env or token_file)")
        previous = _Token.load(since)
        if previous is not None and previous.site != self.config.url:
            previous = None
        same_spaces = previous is not None and previous.spaces == tuple(self.config.spaces)
        async with ConfluenceClient(self.config, token) as client:
            try:
                api = ConfluenceApi(client)
                space_ids, wanted, ancestry, readers = await self._enumerate(api)
                known = previous.pages if previous is not None and same_spaces else {}
                changed = {
                    page_id for page_id, meta in wanted.items()
                    if known.get(page_id) != (meta.space, meta.version, _digest(readers[page_id]))
                }
                # What the next token says is indexed: a changed page keeps its old version
                # until its new one is yielded, so a page that fails is fetched again.
                indexed = {page_id: known[page_id] for page_id in wanted if page_id in known}
                if previous is not None and same_spaces:
                    stream = api.changed_since(self.config.spaces, previous.listed_at - CQL_OVERLAP) \
                        if changed else _nothing()
                else:
                    stream = _spaces_bodies(api, self.config.spaces, space_ids)
                pending = set(changed)
                async for bodies in stream:
                    fresh = [
                        body for body in bodies
                        if body.id in pending and body.version >= wanted[body.id].version
                    ]
                    pending.difference_update(body.id for body in fresh)
                    for item in await self._documents(api, fresh, wanted, ancestry, readers, indexed):
                        yield item
                singles = await _gather(
                    (api.page(page_id, wanted[page_id].space) for page_id in sorted(pending)),
                    self.config.max_concurrency,
                )
                found = [body for body in singles if body is not None]
                for item in await self._documents(api, found, wanted, ancestry, readers, indexed):
                    yield item
            finally:
                self.requests = client.requests
        if previous is not None:
            for page_id, (space, _, _) in sorted(previous.pages.items()):
                now = wanted.get(page_id)
                if now is None or now.space != space:
                    yield Tombstone(self.uri_for(space, page_id))
        self._token = _Token(self.config.url, tuple(self.config.spaces), started, indexed).dump()
        self._complete = not same_spaces

    # -- visibility ------------------------------------------------------------------

    async def _enumerate(self, api: ConfluenceApi) -> tuple[
        dict[str, str], dict[str, PageMeta], dict[str, tuple[str, ...]], dict[str, frozenset[str] | None]
    ]:
        """Space ids, the current pages to index (by id), each page's ancestor ids, and
        each indexed page's readers (None: unrestricted, the source's own access). Raises
        before anything is yielded when any of it cannot be read."""
        space_ids = await api.space_ids(self.config.spaces)
        metas: dict[str, PageMeta] = {}
        for key in self.config.spaces:
            async for meta in api.page_metas(key, space_ids[key]):
                metas[meta.id] = meta
        ancestry = await self._ancestry(api, metas)
        levels = await self._restrictions(api, metas, ancestry)
        readers: dict[str, frozenset[str] | None] = {}
        for page_id in metas:
            chain = [levels[content_id] for content_id in (*ancestry.get(page_id, ()), page_id)]
            restricted = [level for level in chain if level is None or level.restricted]
            if not restricted:
                readers[page_id] = None
            elif self.config.restricted_pages == "honour" and (who := self._readers(restricted)):
                readers[page_id] = who
        wanted = {page_id: meta for page_id, meta in metas.items() if page_id in readers}
        return space_ids, wanted, ancestry, readers

    def _readers(self, levels: Iterable[ReadRestriction | None]) -> frozenset[str]:
        """Who passes every restricted level, as lore's access entries; a level that could
        not be read (None) lets no one through."""
        found: frozenset[str] | None = None
        for level in levels:
            named = self._entries(level) if level is not None else frozenset()
            found = named if found is None else found & named
        if found and self.config.access:
            found &= frozenset(self.config.access)
        return found or frozenset()

    def _entries(self, level: ReadRestriction) -> frozenset[str]:
        """A level's users and groups through the configured maps; what maps to nothing
        grants nobody."""
        config = self.config
        entries: set[str] = set()
        for group in level.groups:
            mapped = config.restriction_groups.get(group)
            if mapped is None and config.restriction_groups_as_named and not bad_group_name(group):
                mapped = group
            if mapped is not None:
                entries.add(mapped)
        for user in level.users:
            keys = (user.account_id, user.username, user.user_key)
            by_id = config.restriction_users
            person = next((by_id[key] for key in keys if key is not None and key in by_id), None)
            if person is None and config.restriction_user_emails:
                person = user.email
            if (normal := identity(person)) is not None:
                entries.add(user_entry(normal))
        return frozenset(entries)

    async def _ancestry(
        self, api: ConfluenceApi, metas: Mapping[str, PageMeta]
    ) -> dict[str, tuple[str, ...]]:
        """Each page's ancestor ids from the root down. Data Center lists them; on Cloud
        the parent links are walked through the listing, and a page whose parent is not a
        listed page (a folder, say) has its ancestors asked for."""
        chains: dict[str, tuple[str, ...]] = {
            page_id: tuple(ancestor for ancestor, _ in meta.ancestors)
            for page_id, meta in metas.items() if meta.ancestors is not None
        }
        outside = sorted(
            page_id for page_id, meta in metas.items()
            if meta.ancestors is None and meta.parent_id is not None and meta.parent_id not in metas
        )
        limit = self.config.max_concurrency
        fetched = await _gather((api.ancestor_ids(page_id) for page_id in outside), limit)
        chains.update(zip(outside, fetched, strict=True))
        for page_id in metas:
            walk: list[str] = []
            current = page_id
            while current not in chains:
                parent = metas[current].parent_id
                if parent is None:
                    chains[current] = ()
                    break
                if current in walk:
                    raise SourceError(f"page {page_id}: its parent links form a loop")
                walk.append(current)
                current = parent
            for child in reversed(walk):
                parent_id = metas[child].parent_id
                assert parent_id is not None
                chains[child] = (*chains[parent_id], parent_id)
        return chains

    async def _restrictions(
        self, api: ConfluenceApi, metas: Mapping[str, PageMeta], ancestry: Mapping[str, tuple[str, ...]]
    ) -> dict[str, ReadRestriction | None]:
        """The own view restriction of every page and ancestor; None for one that cannot
        be read (an ancestor outside the listing, or a page gone meanwhile): restricted,
        to no one. A listed page whose restrictions are refused to the credentials refuses
        the whole source, naming its space."""
        ids = sorted(set(metas) | {ancestor for chain in ancestry.values() for ancestor in chain})

        async def check(content_id: str) -> ReadRestriction | None:
            try:
                return await api.read_restrictions(content_id)
            except ConfluenceHTTPError as err:
                meta = metas.get(content_id)
                if meta is None or err.status == 404:  # not visible to us, or gone: fail closed
                    return None
                if err.status in DENIED:
                    raise PermissionRefusal(
                        f"source {self.name!r}: cannot read the view restrictions of page {content_id} in "
                        f"space {meta.space} with the configured credentials (HTTP {err.status}); "
                        f"refusing to sync space {meta.space}"
                    ) from err
                raise

        checked = await _gather((check(content_id) for content_id in ids), self.config.max_concurrency)
        return dict(zip(ids, checked, strict=True))

    # -- documents -------------------------------------------------------------------

    async def _documents(
        self,
        api: ConfluenceApi,
        bodies: list[PageBody],
        wanted: Mapping[str, PageMeta],
        ancestry: Mapping[str, tuple[str, ...]],
        readers: Mapping[str, frozenset[str] | None],
        indexed: dict[str, tuple[str, int, str]],
    ) -> list[Document | SourceFailure]:
        async def labels(body: PageBody) -> tuple[str, ...]:
            return body.labels if body.labels is not None else await api.labels(body.id)

        tags = await _gather((labels(body) for body in bodies), self.config.max_concurrency)
        # About 10 ms of CPU a page: on a worker thread, so sync's loop keeps writing.
        texts = await asyncio.to_thread(_convert_all, bodies)
        items: list[Document | SourceFailure] = []
        for body, names, text in zip(bodies, tags, texts, strict=True):
            meta = wanted[body.id]
            if isinstance(text, SourceFailure):
                items.append(SourceFailure(self.uri_for(meta.space, body.id), text.reason))
                continue
            who = readers[body.id]
            items.append(self._document(meta, body, text, names, _path(meta, wanted, ancestry), who))
            indexed[body.id] = (meta.space, body.version, _digest(who))
        return items

    def _document(
        self,
        meta: PageMeta,
        body: PageBody,
        text: str,
        names: Iterable[str],
        path: str,
        readers: frozenset[str] | None,
    ) -> Document:
        labels = {SPACE_LABEL: meta.space}
        if path:
            labels[PATH_LABEL] = path
        tags = LABEL_VALUE_SEPARATOR.join(sorted(set(names)))
        if tags:
            labels[TAGS_LABEL] = tags
        labels.update(self.labels)
        return Document(
            uri=self.uri_for(meta.space, body.id),
            title=body.title,
            text=text,
            revision=str(body.version) + (f"+acl.{_digest(readers)}" if readers is not None else ""),
            updated_at=body.updated_at,
            labels=labels,
            media_type="text/markdown",
            access=readers,
        )


def _digest(readers: frozenset[str] | None) -> str:
    """A short digest of a page's readers; "" for an unrestricted page."""
    if readers is None:
        return ""
    return hashlib.sha256("\n".join(sorted(readers)).encode("utf-8")).hexdigest()[:16]


def _convert_all(bodies: Iterable[PageBody]) -> list[str | SourceFailure]:
    """Each body as Markdown, or why not (a SourceFailure whose uri the caller fills in)."""
    converted: list[str | SourceFailure] = []
    for body in bodies:
        if body.storage is None:
            converted.append(SourceFailure("", "the page came without a storage-format body; not indexed"))
            continue
        try:
            converted.append(storage_to_markdown(body.storage))
        except Exception as err:  # a body the parser chokes on costs that page only
            reason = f"cannot convert the storage format: {type(err).__name__}: {err}"
            converted.append(SourceFailure("", reason))
    return converted


def _path(meta: PageMeta, wanted: Mapping[str, PageMeta], ancestry: Mapping[str, tuple[str, ...]]) -> str:
    """Ancestors' titles from the root down (those lore knows: pages, not folders).
    Commas become spaces: a label value is split at commas into filter terms."""
    if meta.ancestors is not None:
        titles = [title for _, title in meta.ancestors if title]
    else:
        titles = [wanted[ancestor].title for ancestor in ancestry.get(meta.id, ()) if ancestor in wanted]
    return PATH_SEPARATOR.join(title.replace(LABEL_VALUE_SEPARATOR, " ") for title in titles)


async def _spaces_bodies(
    api: ConfluenceApi, keys: Iterable[str], space_ids: Mapping[str, str]
) -> AsyncIterator[list[PageBody]]:
    for key in keys:
        async for bodies in api.bodies_in_space(key, space_ids[key]):
            yield bodies


async def _nothing() -> AsyncIterator[list[PageBody]]:
    return
    yield  # an async generator that yields nothing


async def _gather(calls: Iterable[Awaitable[T]], limit: int) -> list[T]:
    """Results in order, at most ``limit`` requests in flight."""
    semaphore = asyncio.Semaphore(limit)

    async def bounded(call: Awaitable[T]) -> T:
        async with semaphore:
            return await call

    return list(await asyncio.gather(*(bounded(call) for call in calls)))


def from_config(
    config: ConfluenceSourceConfig, settings: LoreSettings, visibility: Visibility | None
) -> ConfluenceSource:
    return ConfluenceSource(config, visibility)


