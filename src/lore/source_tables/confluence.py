"""The model of a ``[[sources]]`` table of ``type = "confluence"``."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from lore.access import identity
from lore.source_tables.shared import SourceConfig, SourcePaths, bad_group_name

#: Space keys as Confluence allows them (``~`` opens a personal space's key).
SPACE_KEY_PATTERN = r"^~?[A-Za-z0-9_-]{1,255}$"
_LOOPBACK_NAMES = ("localhost",)


class ConfluenceSourceConfig(SourceConfig):
    """One Confluence site, Cloud or Data Center, and the spaces of it to index.

    There is no ``include_archived``: archived and draft pages are never indexed.
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["confluence"] = "confluence"
    #: The site: ``https://<site>.atlassian.net`` (Cloud; a trailing ``/wiki`` is fine) or
    #: the Data Center base URL with its context path (``https://wiki.example.com/confluence``).
    url: str
    deployment: Literal["cloud", "datacenter"] = "cloud"
    #: Space keys to index; required and never discovered, so adding a space is a decision.
    spaces: list[str] = Field(min_length=1)
    #: Cloud: the Atlassian account the API token belongs to (HTTP Basic). Data Center: unset,
    #: the token is a personal access token sent as a Bearer token.
    email: str | None = None
    token_env: str | None = None
    token_file: Path | None = None
    #: The token itself (write-only: listings say only whether it is set); what a source
    #: added over the API carries instead of token_env/token_file.
    token: SecretStr | None = None
    #: Results asked for per request (Cloud v2 allows 250; servers may return fewer).
    page_size: int = Field(default=100, ge=1, le=250)
    #: Seconds to connect, and to wait for each response.
    connect_timeout: float = Field(default=10.0, gt=0, le=300)
    read_timeout: float = Field(default=60.0, gt=0, le=600)
    #: Attempts per request after the first, on 429, 5xx and transport errors.
    max_retries: int = Field(default=5, ge=0, le=20)
    #: Longest ``Retry-After`` honoured, in seconds; a server asking for longer fails the
    #: listing (nothing is pruned) instead of holding the sync's write lock for it.
    max_retry_after: float = Field(default=120.0, ge=0, le=3600)
    #: First back-off after a 5xx (doubled per attempt, capped at ``max_retry_after``).
    backoff_seconds: float = Field(default=1.0, ge=0, le=60)
    #: Requests in flight at once (restriction checks, labels, single pages).
    max_concurrency: int = Field(default=4, ge=1, le=32)
    #: A page with view restrictions (its own or an ancestor's): "skip" leaves it out;
    #: "honour" indexes it for the readers every restricted level names, mapped to lore's
    #: groups and users below (docs/ingestion.md, "Page restrictions").
    restricted_pages: Literal["skip", "honour"] = "skip"
    #: Confluence group name -> the lore group (as principals carry it) it stands for.
    restriction_groups: dict[str, str] = Field(default_factory=dict)
    #: Whether a Confluence group missing from ``restriction_groups`` stands for the lore
    #: group of the same name (groups provisioned from the same IdP); else it grants nobody.
    restriction_groups_as_named: bool = False
    #: Confluence user (Cloud ``accountId``; Data Center ``username`` or ``userKey``) -> the
    #: identity a principal carries as ``user`` (its IdP's email claim, say).
    restriction_users: dict[str, str] = Field(default_factory=dict)
    #: Whether a restricted user missing from ``restriction_users`` is known by the email
    #: address Confluence returns for them (Cloud shows it only where the profile allows).
    restriction_user_emails: bool = False

    @field_validator("spaces")
    @classmethod
    def _spaces(cls, value: list[str]) -> list[str]:
        keys = [key.strip() for key in value]
        bad = [key for key in keys if not re.match(SPACE_KEY_PATTERN, key)]
        if bad:
            raise ValueError(f"not a Confluence space key: {', '.join(repr(key) for key in bad)}")
        if len(set(keys)) != len(keys):
            raise ValueError("a space is listed twice")
        return keys

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL")
        if parts.username or parts.password:
            raise ValueError("credentials in the URL are refused; use email and token_env or token_file")
        if parts.query or parts.fragment:
            raise ValueError(f"{value!r}: the site URL takes no query or fragment")
        if parts.scheme == "http" and not is_loopback(parts.hostname):
            raise ValueError(f"{value!r}: plain http would send the token in clear; use https")
        return value.strip().rstrip("/")

    @model_validator(mode="after")
    def _auth(self) -> ConfluenceSourceConfig:
        given = sum(bool(value) for value in (self.token_env, self.token_file, self.token))
        if given > 1:
            raise ValueError("set one of token, token_env or token_file")
        if not given:
            raise ValueError("set token_env or token_file (the API token or personal access token)")
        if self.deployment == "cloud" and not self.email:
            raise ValueError("a Cloud site needs email (the account the API token belongs to)")
        if self.deployment == "datacenter" and self.email:
            raise ValueError("a Data Center personal access token is sent alone; remove email")
        return self

    @model_validator(mode="after")
    def _restrictions(self) -> ConfluenceSourceConfig:
        if bad := [group for group in self.restriction_groups.values() if bad_group_name(group)]:
            raise ValueError(f"restriction_groups: {bad[0]!r} is not a lore group name")
        if bad := [person for person in self.restriction_users.values() if identity(person) is None]:
            raise ValueError(
                f"restriction_users: {bad[0]!r} is not an identity (an ASCII email address or subject)"
            )
        if self.restricted_pages != "honour":
            return self
        if self.visibility != "all-viewers" and not self.access:
            raise ValueError(
                'restricted_pages = "honour" needs the space\'s readers: visibility = "all-viewers" '
                "or access = [...] (a restricted page is readable by those its restrictions name "
                "among them)"
            )
        mapped = self.restriction_groups or self.restriction_groups_as_named or self.restriction_users
        if not (mapped or self.restriction_user_emails):
            raise ValueError(
                'restricted_pages = "honour" maps nobody: set restriction_groups, '
                "restriction_groups_as_named, restriction_users or restriction_user_emails"
            )
        return self

    def location(self, settings: SourcePaths) -> str | None:
        return f"{self.url} ({self.deployment}; spaces {', '.join(self.spaces)})"


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
