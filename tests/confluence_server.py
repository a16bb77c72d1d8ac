"""A Confluence site on 127.0.0.1 speaking the documented request and response shapes of
Cloud (REST v2 for spaces, pages, labels, ancestors; v1 for CQL search and restrictions)
and Data Center (v1 under a context path), for the Confluence source's tests and bench.

Pagination is real: the server caps every page of results at ``max_results`` whatever
``limit`` asks, v2 hands out opaque cursors in ``_links.next``, v1 Cloud search uses a
cursor too and Data Center v1 uses ``start``/``limit``/``size`` with ``_links.next``.
Every request is recorded (path, query, headers) for tests to assert on; ``fail`` makes
the next matching requests answer with an error status (429 with Retry-After, 5xx, 403).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

#: When pages start out last edited (edits afterwards take the real time).
CREATED = datetime(2026, 10, 1, 9, 30, tzinfo=UTC)
DATA_CENTER_CONTEXT = "/confluence"


@dataclass
class FakePage:
    id: str
    space: str
    title: str
    #: None: answers carry no storage-format body (what the source must report per page).
    body: str | None
    version: int = 1
    when: datetime = CREATED
    parent: str | None = None
    status: str = "current"
    labels: list[str] = field(default_factory=list)
    #: View restrictions: users (Cloud accountIds, Data Center usernames) and group names.
    restricted_users: list[str] = field(default_factory=list)
    restricted_groups: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Recorded:
    path: str
    query: dict[str, list[str]]
    raw_query: str
    headers: dict[str, str]
    status: int


@dataclass
class _Fault:
    path_pattern: str
    status: int
    times: int
    retry_after: str | None


class ConfluenceServer:
    def __init__(
        self, deployment: str, token: str, *, email: str | None = None, max_results: int = 2
    ) -> None:
        self.deployment = deployment
        self.token = token
        self.email = email
        self.max_results = max_results
        self.spaces: dict[str, str] = {}
        self.pages: dict[str, FakePage] = {}
        self.requests: list[Recorded] = []
        self.denied_spaces: set[str] = set()  # restrictions of these spaces' pages answer 403
        #: Cloud: the email a restricted user's profile lets the API show (accountId -> email).
        self.emails: dict[str, str] = {}
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._next_id = 1000
        handler = type("Handler", (_Handler,), {"site": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> ConfluenceServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        base = f"http://{host!s}:{port}"
        return base if self.deployment == "cloud" else base + DATA_CENTER_CONTEXT

    # -- content ---------------------------------------------------------------------

    def add_space(self, key: str) -> str:
        self.spaces[key] = str(900 + len(self.spaces))
        return self.spaces[key]

    def add_page(self, space: str, title: str, body: str | None, **fields: Any) -> FakePage:
        with self._lock:
            self._next_id += 1
            page = FakePage(str(self._next_id), space, title, body, **fields)
            self.pages[page.id] = page
        return page

    def edit(self, page_id: str, body: str) -> None:
        page = self.pages[page_id]
        page.body, page.version, page.when = body, page.version + 1, datetime.now(UTC)

    def fail(self, path_pattern: str, status: int, *, times: int = 1, retry_after: str | None = None) -> None:
        """The next ``times`` requests whose path matches the regex answer ``status``."""
        self._faults.append(_Fault(path_pattern, status, times, retry_after))

    def paths(self) -> list[str]:
        return [request.path for request in self.requests]

    # -- request handling ------------------------------------------------------------

    def authorised(self, header: str | None) -> bool:
        if self.deployment == "cloud":
            expected = base64.b64encode(f"{self.email}:{self.token}".encode()).decode()
            return header == f"Basic {expected}"
        return header == f"Bearer {self.token}"

    def fault(self, path: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.times > 0 and re.search(fault.path_pattern, path):
                    fault.times -= 1
                    return fault
        return None

    def route(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        one = {key: values[0] for key, values in query.items()}
        prefix = "/wiki" if self.deployment == "cloud" else DATA_CENTER_CONTEXT
        if not path.startswith(prefix):
            return 404, {"message": "not found"}
        path = path[len(prefix):]
        routes = _CLOUD_ROUTES if self.deployment == "cloud" else _DC_ROUTES
        for pattern, method in routes:
            match = re.fullmatch(pattern, path)
            if match:
                return method(self, one, *match.groups())  # type: ignore[operator]
        return 404, {"message": f"no route {path}"}

    # -- Cloud v2 --------------------------------------------------------------------

    def v2_spaces(self, query: dict[str, str]) -> tuple[int, Any]:
        keys = query.get("keys", "").split(",")
        results = [{"id": sid, "key": key, "name": key, "type": "global", "status": "current"}
                   for key, sid in self.spaces.items() if key in keys]
        return 200, {"results": results, "_links": {"base": self.url + "/wiki"}}

    def v2_space_pages(self, query: dict[str, str], space_id: str) -> tuple[int, Any]:
        key = next((k for k, v in self.spaces.items() if v == space_id), None)
        if key is None:
            return 404, {"errors": [{"status": 404, "title": "Not Found"}]}
        statuses = query.get("status", "current,archived").split(",")
        pages = [p for p in self._ordered() if p.space == key and p.status in statuses]
        start = int(base64.b64decode(query["cursor"]).decode()) if "cursor" in query else 0
        size = min(int(query.get("limit", 25)), self.max_results)
        chunk = pages[start:start + size]
        body: dict[str, Any] = {"results": [self._v2_page(p, query.get("body-format")) for p in chunk],
                                "_links": {"base": self.url + "/wiki"}}
        if start + size < len(pages):
            cursor = base64.b64encode(str(start + size).encode()).decode()
            rest = {k: v for k, v in query.items() if k != "cursor"}
            following = urlencode({**rest, "cursor": cursor})
            body["_links"]["next"] = f"/wiki/api/v2/spaces/{space_id}/pages?{following}"
        return 200, body

    def v2_page(self, query: dict[str, str], page_id: str) -> tuple[int, Any]:
        page = self.pages.get(page_id)
        if page is None or page.status == "deleted":
            return 404, {"errors": [{"status": 404}]}
        return 200, self._v2_page(page, query.get("body-format"))

    def v2_labels(self, query: dict[str, str], page_id: str) -> tuple[int, Any]:
        page = self.pages[page_id]
        results = [{"id": str(n), "name": name, "prefix": "global"} for n, name in enumerate(page.labels)]
        return 200, {"results": results, "_links": {}}

    def v2_ancestors(self, query: dict[str, str], page_id: str) -> tuple[int, Any]:
        return 200, {"results": [{"id": a.id, "type": "page"} for a in self._ancestors(self.pages[page_id])],
                     "_links": {}}

    def _v2_page(self, page: FakePage, body_format: str | None) -> dict[str, Any]:
        item: dict[str, Any] = {
            "id": page.id, "status": page.status, "title": page.title, "spaceId": self.spaces[page.space],
            "parentId": page.parent, "parentType": "page" if page.parent else None,
            "authorId": "557058:aaaa", "createdAt": _iso(CREATED),
            "version": {"number": page.version, "createdAt": _iso(page.when), "message": "",
                        "minorEdit": False, "authorId": "557058:aaaa"},
            "_links": {"webui": f"/spaces/{page.space}/pages/{page.id}", "tinyui": f"/x/{page.id}"},
        }
        if body_format == "storage" and page.body is not None:
            item["body"] = {"storage": {"representation": "storage", "value": page.body}}
        return item

    # -- v1 (Cloud search and restrictions; everything on Data Center) ---------------

    def v1_space(self, query: dict[str, str], key: str) -> tuple[int, Any]:
        if key not in self.spaces:
            return 404, {"statusCode": 404, "message": f"No space with key : {key}"}
        return 200, {"id": int(self.spaces[key]), "key": key, "name": key, "type": "global"}

    def v1_content(self, query: dict[str, str]) -> tuple[int, Any]:
        status = query.get("status", "current")
        pages = [p for p in self._ordered() if p.space == query.get("spaceKey") and p.status == status]
        return self._v1_list(pages, query, "/rest/api/content")

    def v1_one(self, query: dict[str, str], page_id: str) -> tuple[int, Any]:
        page = self.pages.get(page_id)
        if page is None or page.status == "deleted":
            return 404, {"statusCode": 404}
        return 200, self._v1_page(page, query.get("expand", ""))

    def v1_search(self, query: dict[str, str]) -> tuple[int, Any]:
        cql = query.get("cql", "")
        spaces = re.findall(r'"([^"]+)"', re.search(r"space in \(([^)]*)\)", cql).group(1))  # type: ignore[union-attr]
        since = re.search(r'lastmodified >= "([^"]+)"', cql)
        floor = datetime.strptime(since.group(1), "%Y-%m-%d %H:%M").replace(tzinfo=UTC) if since else None
        found = (p for p in self.pages.values() if p.space in spaces and p.status == "current")
        pages = sorted((p for p in found if floor is None or p.when >= floor), key=lambda p: p.when)
        return self._v1_list(pages, query, "/rest/api/content/search")

    def v1_restrictions(self, query: dict[str, str], page_id: str) -> tuple[int, Any]:
        """``GET /rest/api/content/{id}/restriction/byOperation/read``: the users and groups
        of the page's own read restriction, ``start``/``limit`` applying to each list
        (capped at ``max_results``), expanded as ``expand`` asks (both by default)."""
        page = self.pages.get(page_id)
        if page is None:
            return 404, {"statusCode": 404}
        if page.space in self.denied_spaces:
            return 403, {"statusCode": 403, "message": "not permitted to view restrictions"}
        start = int(query.get("start", 0))
        limit = min(int(query.get("limit", 200)), self.max_results)
        expand = set(query.get("expand", "restrictions.user,restrictions.group").split(","))
        users = [self._user(name) for name in page.restricted_users]
        groups = [{"type": "group", "name": name, "id": f"g-{name}"} for name in page.restricted_groups]
        restrictions: dict[str, Any] = {"_expandable": {}}
        for kind, everyone in (("user", users), ("group", groups)):
            if f"restrictions.{kind}" not in expand:
                link = f"/rest/api/content/{page_id}/restriction/byOperation/read/{kind}"
                restrictions["_expandable"][kind] = link
                continue
            chunk = everyone[start:start + limit]
            restrictions[kind] = {"results": chunk, "start": start, "limit": limit, "size": len(chunk),
                                  "totalSize": len(everyone), "_links": {}}
        return 200, {
            "operation": "read",
            "restrictions": restrictions,
            "_expandable": {"content": f"/rest/api/content/{page_id}"},
            "_links": {"base": self.url},
        }

    def _user(self, name: str) -> dict[str, Any]:
        if self.deployment == "cloud":
            return {"type": "known", "accountId": name, "accountType": "atlassian",
                    "email": self.emails.get(name, ""), "publicName": name, "displayName": name}
        return {"type": "known", "username": name, "userKey": f"key-{name}", "displayName": name}

    def _v1_list(self, pages: list[FakePage], query: dict[str, str], path: str) -> tuple[int, Any]:
        cursor_mode = self.deployment == "cloud"
        if cursor_mode and "cursor" in query:
            start = int(base64.b64decode(query["cursor"]).decode())
        else:
            start = int(query.get("start", 0))
        size = min(int(query.get("limit", 25)), self.max_results)
        chunk = pages[start:start + size]
        base = self.url + ("/wiki" if self.deployment == "cloud" else "")
        body: dict[str, Any] = {
            "results": [self._v1_page(p, query.get("expand", "")) for p in chunk],
            "start": start, "limit": size, "size": len(chunk),
            "_links": {"base": base, "context": "/wiki" if cursor_mode else DATA_CENTER_CONTEXT},
        }
        if start + size < len(pages):
            rest = {k: v for k, v in query.items() if k not in ("start", "cursor")}
            if cursor_mode:
                rest.update(next="true", cursor=base64.b64encode(str(start + size).encode()).decode())
            else:
                rest["start"] = str(start + size)
            body["_links"]["next"] = f"{path}?{urlencode(rest)}"
        return 200, body

    def _v1_page(self, page: FakePage, expand: str) -> dict[str, Any]:
        wanted = set(expand.split(","))
        item: dict[str, Any] = {
            "id": page.id, "type": "page", "status": page.status, "title": page.title,
            "version": {"number": page.version, "when": _iso(page.when), "minorEdit": False,
                        "by": {"type": "known", "displayName": "Author"}},
            "_links": {"webui": f"/display/{page.space}/{page.id}"},
            "_expandable": {"children": f"/rest/api/content/{page.id}/child"},
        }
        if "space" in wanted:
            item["space"] = {"id": int(self.spaces[page.space]), "key": page.space, "name": page.space}
        if "ancestors" in wanted:
            item["ancestors"] = [{"id": a.id, "type": "page", "status": "current", "title": a.title}
                                 for a in self._ancestors(page)]
        if "body.storage" in wanted and page.body is not None:
            item["body"] = {"storage": {"value": page.body, "representation": "storage"}}
        if "metadata.labels" in wanted:
            labels = [{"prefix": "global", "name": name, "id": str(n)} for n, name in enumerate(page.labels)]
            item["metadata"] = {"labels": {"results": labels, "start": 0, "limit": 200, "size": len(labels)}}
        return item

    def _ancestors(self, page: FakePage) -> list[FakePage]:
        chain: list[FakePage] = []
        while page.parent is not None:
            page = self.pages[page.parent]
            chain.insert(0, page)
        return chain

    def _ordered(self) -> Iterator[FakePage]:
        return iter(sorted(self.pages.values(), key=lambda p: int(p.id)))


_CLOUD_ROUTES = [
    (r"/api/v2/spaces", ConfluenceServer.v2_spaces),
    (r"/api/v2/spaces/(\d+)/pages", ConfluenceServer.v2_space_pages),
    (r"/api/v2/pages/(\d+)", ConfluenceServer.v2_page),
    (r"/api/v2/pages/(\d+)/labels", ConfluenceServer.v2_labels),
    (r"/api/v2/pages/(\d+)/ancestors", ConfluenceServer.v2_ancestors),
    (r"/rest/api/content/search", ConfluenceServer.v1_search),
    (r"/rest/api/content/(\d+)/restriction/byOperation/read", ConfluenceServer.v1_restrictions),
]
_DC_ROUTES = [
    (r"/rest/api/space/([^/]+)", ConfluenceServer.v1_space),
    (r"/rest/api/content", ConfluenceServer.v1_content),
    (r"/rest/api/content/search", ConfluenceServer.v1_search),
    (r"/rest/api/content/(\d+)", ConfluenceServer.v1_one),
    (r"/rest/api/content/(\d+)/restriction/byOperation/read", ConfluenceServer.v1_restrictions),
]


class _Handler(BaseHTTPRequestHandler):
    site: ConfluenceServer

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        site = self.site
        status: int
        payload: Any
        extra: dict[str, str] = {}
        if not site.authorised(self.headers.get("Authorization")):
            status, payload = 401, {"statusCode": 401, "message": "Unauthorized"}
        elif (fault := site.fault(parts.path)) is not None:
            status, payload = fault.status, {"statusCode": fault.status, "message": "injected"}
            if fault.retry_after is not None:
                extra["Retry-After"] = fault.retry_after
        else:
            status, payload = site.route(parts.path, query)
        with site._lock:
            site.requests.append(Recorded(parts.path, query, parts.query, dict(self.headers), status))
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
