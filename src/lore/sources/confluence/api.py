"""The Confluence endpoints the source reads, Cloud and Data Center, as typed records.

Cloud: REST v2 for spaces, page listings, bodies, labels and ancestors; v1 for CQL search
(the incremental listing) and view restrictions, which v2 does not offer. Data Center:
v1 throughout (``start``/``limit`` pages, followed through ``_links.next``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from lore.errors import ConfluenceHTTPError, PermissionRefusal, SourceError
from lore.sources.confluence.client import ConfluenceClient, Json, parse_time

#: v1 expansions of a page whose body is indexed.
_V1_BODY_EXPAND = "body.storage,version,space,metadata.labels"
#: HTTP statuses that mean "these credentials may not see this".
DENIED = (401, 403)
#: Pages of one content's restricted users and groups read at most.
_RESTRICTION_PAGES = 20


@dataclass(frozen=True, slots=True)
class RestrictedUser:
    """A user a view restriction names, by whatever the deployment says of them."""

    #: Cloud's ``accountId``.
    account_id: str | None = None
    #: Data Center's ``username`` and ``userKey``.
    username: str | None = None
    user_key: str | None = None
    #: The email address, where Cloud's profile visibility lets the API return it.
    email: str | None = None


@dataclass(frozen=True, slots=True)
class ReadRestriction:
    """One content's own view restriction (an ancestor's is read on its own)."""

    restricted: bool
    users: tuple[RestrictedUser, ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PageMeta:
    """A current page as a listing without bodies describes it."""

    id: str
    space: str
    title: str
    version: int
    #: Cloud (v2): the parent's id; the ancestry is walked through the listing.
    parent_id: str | None
    #: Data Center (v1 ``expand=ancestors``): (id, title) from the root down.
    ancestors: tuple[tuple[str, str], ...] | None


@dataclass(frozen=True, slots=True)
class PageBody:
    """A page with the storage-format body that is indexed."""

    id: str
    space: str
    title: str
    version: int
    updated_at: datetime
    #: None: the answer carried no storage-format body (a per-page failure, not fatal).
    storage: str | None
    #: None: the response did not carry labels (Cloud v2), so they are asked for.
    labels: tuple[str, ...] | None


class ConfluenceApi:
    def __init__(self, client: ConfluenceClient) -> None:
        self.client = client
        self.cloud = client.config.deployment == "cloud"
        self.page_size = client.config.page_size

    # -- spaces ----------------------------------------------------------------------

    async def space_ids(self, keys: Sequence[str]) -> dict[str, str]:
        """Space key -> id; refuses (naming them) spaces the credentials cannot see."""
        found: dict[str, str] = {}
        if self.cloud:
            params: dict[str, str | int] = {"keys": ",".join(keys), "limit": 250}
            async for results in self.client.results("/api/v2/spaces", params, v2=True):
                for space in results:
                    if space.get("key") in keys and space.get("id") is not None:
                        found[str(space["key"])] = str(space["id"])
        else:
            for key in keys:
                try:
                    space = await self.client.get(f"/rest/api/space/{key}")
                except ConfluenceHTTPError as err:
                    if err.status in (403, 404):  # 401 is the credentials, said as such
                        continue
                    raise
                found[key] = str(space.get("id", key))
        missing = [key for key in keys if key not in found]
        if missing:
            raise PermissionRefusal(
                f"space {', '.join(missing)} does not exist or cannot be read with the configured "
                "credentials; refusing to sync this source"
            )
        return found

    # -- listings --------------------------------------------------------------------

    async def page_metas(self, key: str, space_id: str) -> AsyncIterator[PageMeta]:
        """Every current page of a space, without bodies (archived and drafts left out)."""
        if self.cloud:
            params: dict[str, str | int] = {"status": "current", "limit": self.page_size}
            path = f"/api/v2/spaces/{space_id}/pages"
        else:
            params = {"spaceKey": key, "type": "page", "status": "current", "limit": self.page_size,
                      "expand": "version,ancestors"}
            path = "/rest/api/content"
        async for results in self.client.results(path, params, v2=self.cloud):
            for item in results:
                if _current_page(item):
                    yield self._meta(item, key)

    async def bodies_in_space(self, key: str, space_id: str) -> AsyncIterator[list[PageBody]]:
        """Every current page of a space with its body, one list per response."""
        if self.cloud:
            params: dict[str, str | int] = {"status": "current", "limit": self.page_size,
                                            "body-format": "storage"}
            path = f"/api/v2/spaces/{space_id}/pages"
        else:
            params = {"spaceKey": key, "type": "page", "status": "current", "limit": self.page_size,
                      "expand": _V1_BODY_EXPAND}
            path = "/rest/api/content"
        async for results in self.client.results(path, params, v2=self.cloud):
            yield [self._body(item, key) for item in results if _current_page(item)]

    async def changed_since(self, keys: Sequence[str], since: datetime) -> AsyncIterator[list[PageBody]]:
        """Pages of these spaces modified at or after ``since``, by CQL (v1, both
        deployments), with bodies. CQL dates are minutes in the caller's time zone, so the
        caller passes a ``since`` early enough to cover any offset."""
        spaces = ", ".join(json.dumps(key) for key in keys)
        cql = (f'space in ({spaces}) and type=page and lastmodified >= "{since:%Y-%m-%d %H:%M}" '
               "order by lastmodified")
        params: dict[str, str | int] = {"cql": cql, "limit": self.page_size, "expand": _V1_BODY_EXPAND}
        async for results in self.client.results("/rest/api/content/search", params, v2=False):
            yield [self._body(item, None) for item in results if _current_page(item)]

    async def page(self, page_id: str, key: str) -> PageBody | None:
        """One page with its body; None when it is gone (or no longer visible)."""
        try:
            if self.cloud:
                item = await self.client.get(f"/api/v2/pages/{page_id}", {"body-format": "storage"})
            else:
                item = await self.client.get(f"/rest/api/content/{page_id}", {"expand": _V1_BODY_EXPAND})
        except ConfluenceHTTPError as err:
            if err.status in (*DENIED, 404):
                return None
            raise
        return self._body(item, key) if _current_page(item) else None

    async def labels(self, page_id: str) -> tuple[str, ...]:
        names: list[str] = []
        async for results in self.client.results(
            f"/api/v2/pages/{page_id}/labels", {"limit": self.page_size}, v2=True
        ):
            names.extend(str(label["name"]) for label in results if label.get("name"))
        return tuple(names)

    async def ancestor_ids(self, page_id: str) -> tuple[str, ...]:
        """Cloud: every ancestor of a page (pages, folders, ...) from the root down."""
        ids: list[str] = []
        async for results in self.client.results(
            f"/api/v2/pages/{page_id}/ancestors", {"limit": self.page_size}, v2=True
        ):
            ids.extend(str(item["id"]) for item in results if item.get("id") is not None)
        return tuple(ids)

    # -- restrictions ----------------------------------------------------------------

    async def read_restrictions(self, content_id: str) -> ReadRestriction:
        """The content's own view restrictions: whether it has any, and the users and
        groups they name (``/rest/api/content/{id}/restriction/byOperation/read``, both
        deployments; v2 has no such endpoint).

        Users and groups are paged together (``start``/``limit``) while either list has
        more (its ``totalSize``, else a page as long as the server's ``limit``); at most
        ``_RESTRICTION_PAGES`` pages are read, and a list cut there names fewer readers
        than it has, which can only hide the page from some of them.
        Raises ConfluenceHTTPError (401/403/404) when they cannot be read, and SourceError
        when the answer does not say who may read it: never guessed as "unrestricted"."""
        path = f"/rest/api/content/{content_id}/restriction/byOperation/read"
        users: list[RestrictedUser] = []
        groups: list[str] = []
        restricted = False
        start = 0
        for _ in range(_RESTRICTION_PAGES):
            params: dict[str, str | int] = {
                "expand": "restrictions.user,restrictions.group", "start": start, "limit": self.page_size,
            }
            body = await self.client.get(path, params)
            restrictions = body.get("restrictions")
            if not isinstance(restrictions, dict):
                raise SourceError(f"the view restrictions of {content_id} are not in the response")
            more = False
            step = self.page_size
            for kind in ("user", "group"):
                entry = restrictions.get(kind)
                if not isinstance(entry, dict):
                    raise SourceError(f"the {kind} view restrictions of {content_id} are not in the response")
                results = entry.get("results")
                listed = results if isinstance(results, list) else []
                items = [item for item in listed if isinstance(item, dict)]
                restricted = restricted or bool(items) or _positive(entry.get("size")) \
                    or _positive(entry.get("totalSize"))
                # The server may cap ``limit`` below what was asked: its own says the step.
                served = entry.get("limit")
                cap = served if isinstance(served, int) and served > 0 else None
                step = min(step, cap) if cap is not None else step
                total = entry.get("totalSize")
                if isinstance(total, int):
                    more = more or start + len(items) < total
                else:
                    more = more or (cap is not None and len(items) >= cap)
                if kind == "user":
                    users.extend(_restricted_user(item) for item in items)
                else:
                    groups.extend(str(item["name"]) for item in items if item.get("name"))
            if not more:
                break
            start += step
        return ReadRestriction(restricted, tuple(users), tuple(groups))

    # -- records ---------------------------------------------------------------------

    def _meta(self, item: Json, key: str) -> PageMeta:
        page_id, title, version, _ = _identity(item)
        if self.cloud:
            parent = item.get("parentId")
            return PageMeta(page_id, key, title, version, str(parent) if parent else None, None)
        ancestors = item.get("ancestors")
        chain = tuple(
            (str(entry["id"]), str(entry.get("title", "")))
            for entry in (ancestors if isinstance(ancestors, list) else [])
            if isinstance(entry, dict) and entry.get("id") is not None
        )
        return PageMeta(page_id, key, title, version, None, chain)

    def _body(self, item: Json, key: str | None) -> PageBody:
        page_id, title, version, updated_at = _identity(item)
        body = item.get("body")
        storage = body.get("storage") if isinstance(body, dict) else None
        value = storage.get("value") if isinstance(storage, dict) else None
        space = key
        if space is None:  # a CQL result: v1 ``space`` expansion
            holder = item.get("space")
            space = str(holder.get("key")) if isinstance(holder, dict) and holder.get("key") else ""
        metadata = item.get("metadata")
        labels_holder = metadata.get("labels") if isinstance(metadata, dict) else None
        labels: tuple[str, ...] | None = None
        if isinstance(labels_holder, dict) and isinstance(labels_holder.get("results"), list):
            labels = tuple(
                str(label["name"]) for label in labels_holder["results"]
                if isinstance(label, dict) and label.get("name")
            )
        text = value if isinstance(value, str) else None
        return PageBody(page_id, space, title, version, updated_at, text, labels)


def _identity(item: Json) -> tuple[str, str, int, datetime]:
    """id, title, version number and the version's time, from a v2 or v1 page object."""
    page_id = item.get("id")
    version = item.get("version")
    number = version.get("number") if isinstance(version, dict) else None
    # v2: version.createdAt; v1: version.when.
    when = parse_time(version.get("createdAt") or version.get("when")) if isinstance(version, dict) else None
    if page_id is None or not isinstance(number, int) or when is None:
        raise SourceError(f"page {page_id}: the response has no id, version number or version time")
    return str(page_id), str(item.get("title") or page_id), number, when


def _current_page(item: Json) -> bool:
    """Archived, draft and trashed pages are never indexed, whatever a server returns."""
    return bool(item.get("status", "current") == "current" and item.get("type", "page") == "page")


def _restricted_user(item: Json) -> RestrictedUser:
    def text(key: str) -> str | None:
        value = item.get(key)
        return str(value) if isinstance(value, str | int) and str(value) else None

    return RestrictedUser(text("accountId"), text("username"), text("userKey"), text("email"))


def _positive(value: object) -> bool:
    return isinstance(value, int) and value > 0
