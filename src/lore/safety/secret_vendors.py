"""Vendor token formats: detect-secrets' plugins first, then lore's table for what they miss.

detect-secrets (Yelp) ships one plugin per vendor, each a list of documented token
regexes (``plugin.denylist``). Its scanner is line-based and reports lines, but the
regexes themselves give exact spans, which is what in-place redaction needs: so lore runs
those regexes over the whole text itself, without the scanner, its global settings or its
keyword/entropy plugins (lore's own ``secret_rules`` cover keys and values, with
placeholder and look-alike checks those plugins lack).

A span is widened to the whole token around it (Stripe's regex matches the first 24
characters of keys that are now longer; a key must not leave its tail behind).

``EXTRA_VENDORS`` holds formats detect-secrets 1.5 has no plugin for (Anthropic, Google,
OpenAI project keys without the legacy ``T3BlbkFJ`` marker, npm tokens outside ``.npmrc``,
Hugging Face, HashiCorp Vault, …), from each vendor's documented prefix.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from detect_secrets.plugins.base import RegexBasedDetector

from lore.safety.lazy_regex import compile_later
from lore.safety.secret_rules import PatternRule, whole
from lore.safety.secret_shapes import is_placeholder, redacted


#: The plugins whose regexes name a token format. Not used: PrivateKey (matches only
#: the BEGIN line; ``secret_rules.PRIVATE_KEY`` takes the whole block), BasicAuth and
#: JWT (lore's rules add placeholder and structure checks), IPPublic (not a secret),
#: Keyword and the entropy plugins (line heuristics, replaced by lore's keyed rules).
def _keyword_hints(*prefixes: str) -> tuple[str, ...]:
    """``cl_api_key``, ``sl-password``, ``cloudant``: a prefix joined to a credential word."""
    words = ("key", "pwd", "pw", "pass", "token", "api")
    return (*prefixes[:1], *(f"{p}{sep}{w}" for p in prefixes for sep in ("", "_", "-") for w in words))


#: A plugin (its module under ``detect_secrets.plugins`` and its class), its kind (or
#: one kind per regex of its ``denylist``, the last one repeating), and its hints:
#: strings one of which a text must hold for it to match. Named, not imported: see
#: ``library_rules``.
_PLUGINS: tuple[tuple[str, str, str | tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "aws",
        "AWSKeyDetector",
        ("aws_access_key_id", "aws_secret_access_key"),
        ("akia", "asia", "abia", "acca", "a3t", "aws"),
    ),
    ("github_token", "GitHubTokenDetector", "github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    ("gitlab_token", "GitLabTokenDetector", "gitlab_token", ("gl", "gr1348941")),
    ("slack", "SlackDetector", "slack_token", ("xox", "hooks.slack.com")),
    ("stripe", "StripeDetector", "stripe_key", ("k_live_",)),
    ("openai", "OpenAIDetector", "openai_api_key", ("t3blbkfj",)),
    ("npm", "NpmDetector", "npm_token", ("_authtoken",)),
    ("pypi_token", "PypiTokenDetector", "pypi_token", ("pypi-",)),
    ("sendgrid", "SendGridDetector", "sendgrid_api_key", ("sg.",)),
    ("twilio", "TwilioKeyDetector", "twilio_key", ("AC", "SK")),
    ("mailchimp", "MailchimpDetector", "mailchimp_api_key", ("-us",)),
    ("discord", "DiscordBotTokenDetector", "discord_bot_token", ()),
    ("telegram_token", "TelegramBotTokenDetector", "telegram_bot_token", (":",)),
    ("square_oauth", "SquareOAuthDetector", "square_oauth_secret", ("sq0csp-",)),
    (
        "artifactory",
        "ArtifactoryDetector",
        "artifactory_token",
        ("AKC", *(f"AP{c}" for c in "0123456789ABCDEF")),
    ),
    ("azure_storage_key", "AzureStorageKeyDetector", "azure_storage_key", ("accountkey=",)),
    ("ibm_cloud_iam", "IbmCloudIamDetector", "ibm_cloud_iam_key", ("key", "pwd", "pass", "token")),
    ("ibm_cos_hmac", "IbmCosHmacDetector", "ibm_cos_hmac_secret", ("secret",)),
    ("cloudant", "CloudantDetector", "cloudant_credentials", _keyword_hints("cloudant", "clou", "cl")),
    ("softlayer", "SoftlayerDetector", "softlayer_credentials", _keyword_hints("softlayer", "sl")),
)

_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_\-]")
_DELIMITERS = " \t\r\n=:\"'"
#: A capture group shorter than this is a prefix alternative (``(ghp|gho)``), not the secret.
_MIN_SECRET_GROUP = 8


@dataclass(frozen=True)
class LibraryRule:
    """One detect-secrets regex, applied to spans rather than lines."""

    kind: str
    #: The regex as written, compiled on first use (``pattern``): most texts hold none of
    #: a rule's hints, so a cold search compiles a few of the dozens, not all of them.
    source: str
    flags: int = 0
    hints: tuple[str, ...] = ()

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.source, self.flags)

    def apply(self, text: str, findings: Counter[str]) -> str:
        spans: list[tuple[int, int]] = []
        for match in self.pattern.finditer(text):
            span = self._secret_span(text, match)
            if span is not None and not _is_example(text[span[0] : span[1]]):
                spans.append(span)
        if not spans:
            return text
        merged: list[tuple[int, int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        for start, end in reversed(merged):
            text = text[:start] + redacted(self.kind) + text[end:]
        findings[self.kind] += len(merged)
        return text

    def _secret_span(self, text: str, match: re.Match[str]) -> tuple[int, int] | None:
        groups = [i for i in range(1, (self.pattern.groups or 0) + 1) if match.group(i) is not None]
        longest = max(groups, key=lambda i: len(match.group(i)), default=None)
        if longest is not None and len(match.group(longest)) >= _MIN_SECRET_GROUP:
            start, end = match.span(longest)
        else:
            start, end = match.span()
        while start < end and text[start] in _DELIMITERS:
            start += 1
        while end > start and text[end - 1] in _DELIMITERS:
            end -= 1
        if start == end:
            return None
        while start > 0 and _TOKEN_CHAR.match(text[start - 1]):
            start -= 1
        while end < len(text) and _TOKEN_CHAR.match(text[end]):
            end += 1
        return start, end


def _is_example(secret: str) -> bool:
    # the last path segment too: an example webhook ``…/XXXXXXXXXXXXXXXXXXXXXXXX``
    return is_placeholder(secret) or is_placeholder(secret.rsplit("/", 1)[-1])


@functools.cache
def library_rules() -> tuple[LibraryRule, ...]:
    """detect-secrets' token regexes, from a cache of them when the installed
    detect-secrets is the one the cache was made from: importing the package costs a cold
    ``lore search`` 0.2 s (its ``__init__`` loads the scanner and ``requests``), compiling
    the few dozen regexes a millisecond."""
    key = _installed_key()
    cached = _read_cache(key) if key is not None else None
    if cached is not None:
        return tuple(cached)
    rules = _rules_from_plugins()
    if key is not None:
        _write_cache(key, rules)
    return tuple(rules)


def _rules_from_plugins() -> list[LibraryRule]:
    import detect_secrets.plugins

    rules = []
    for module, name, kinds, hints in _PLUGINS:
        plugin: type[RegexBasedDetector] = getattr(
            importlib.import_module(f"{detect_secrets.plugins.__name__}.{module}"), name
        )
        names = (kinds,) if isinstance(kinds, str) else kinds
        for position, pattern in enumerate(plugin().denylist):
            if isinstance(pattern, re.Pattern):
                rules.append(
                    LibraryRule(names[min(position, len(names) - 1)], pattern.pattern, pattern.flags, hints)
                )
    return rules


#: Bumped when what lore takes from the plugins changes shape.
_CACHE_FORMAT = 1
_logger = logging.getLogger(__name__)


def _installed_key() -> str | None:
    """Identifies the installed plugin files (path, size, mtime) and lore's table of them,
    without importing detect-secrets; None when it cannot be found this way."""
    try:
        spec = importlib.util.find_spec("detect_secrets")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    plugins = Path(spec.origin).parent / "plugins"
    digest = hashlib.sha256(f"{_CACHE_FORMAT}|{_PLUGINS!r}".encode())
    try:
        for module, _, _, _ in _PLUGINS:
            path = plugins / f"{module}.py"
            info = path.stat()
            digest.update(f"|{path}|{info.st_size}|{info.st_mtime_ns}".encode())
    except OSError:
        return None
    return digest.hexdigest()


def _cache_path(key: str) -> Path:
    # The environment form of the ``cache_dir`` setting; the redactor is built without
    # settings in some places, and a miss only costs the import. One file per installed
    # detect-secrets (the key names its files): two environments of one user (a pipx
    # install and a project's venv) would otherwise overwrite each other's on every run.
    name = f"detect-secrets-patterns-{key[:16]}.json"
    configured = os.environ.get("LORE_CACHE_DIR")
    if configured:
        return Path(configured).expanduser() / name
    import platformdirs

    return platformdirs.user_cache_path("lore") / name


def _read_cache(key: str) -> list[LibraryRule] | None:
    try:
        data = json.loads(_cache_path(key).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        # Not compiled here (``LibraryRule.pattern``): they compiled when this lore wrote
        # them under this key; a file edited since fails closed at first use, as an error
        # result, never an unredacted one.
        rules = [
            LibraryRule(kind, pattern, flags, tuple(hints)) for kind, pattern, flags, hints in data["rules"]
        ]
        if not all(isinstance(rule.source, str) and isinstance(rule.flags, int) for rule in rules):
            return None
        return rules
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, torn or foreign: rebuilt from the plugins


def _write_cache(key: str, rules: list[LibraryRule]) -> None:
    path = _cache_path(key)
    data = {
        "key": key,
        "rules": [[rule.kind, rule.source, rule.flags, list(rule.hints)] for rule in rules],
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, staging = tempfile.mkstemp(prefix=".patterns-", dir=path.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(data, out)
        os.replace(staging, path)  # readers see the whole table or the previous one
    except OSError as err:
        _logger.debug("cannot cache detect-secrets' patterns under %s: %s", path.parent, err)


def _token(kind: str, pattern: str, *hints: str) -> PatternRule:
    """A vendor token: a documented prefix, not glued to a longer word on either side."""
    bounded = rf"(?<![A-Za-z0-9_\-])(?:{pattern})(?![A-Za-z0-9_\-])"
    return PatternRule(kind, compile_later(bounded), whole(kind), hints)


#: What detect-secrets 1.5 misses, from each vendor's documented token format.
EXTRA_VENDORS: tuple[PatternRule, ...] = (
    _token("anthropic_api_key", r"sk-ant-(?:api|admin|oat|sid)\d{2}-[A-Za-z0-9_\-]{32,}", "sk-ant-"),
    _token("openai_api_key", r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}|sk-[A-Za-z0-9]{48}", "sk-"),
    _token(
        "stripe_key",
        r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,}",
        "k_live_",
        "k_test_",
        "whsec_",
    ),
    _token("npm_token", r"npm_[A-Za-z0-9]{36}", "npm_"),
    _token("google_api_key", r"AIza[0-9A-Za-z_\-]{35}", "aiza"),
    _token("google_oauth_secret", r"GOCSPX-[A-Za-z0-9_\-]{28}", "gocspx-"),
    _token("huggingface_token", r"(?:hf|api_org)_[A-Za-z0-9]{34,}", "hf_", "api_org_"),
    _token("vault_token", r"hv[sbr]\.[A-Za-z0-9_\-]{24,}", "hvs.", "hvb.", "hvr."),
    _token("digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}", "_v1_"),
    _token("shopify_token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", "shp"),
    _token(
        "grafana_token", r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2}", "glsa_", "glc_"
    ),
    _token("databricks_token", r"dapi[a-f0-9]{32}(?:-\d)?", "dapi"),
    _token("postman_api_key", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}", "pmak-"),
    _token("atlassian_api_token", r"ATATT3[A-Za-z0-9_\-=]{100,}", "atatt3"),
    _token("linear_api_key", r"lin_api_[A-Za-z0-9]{40}", "lin_api_"),
    _token("doppler_token", r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}", "dp."),
    _token("pulumi_token", r"pul-[a-f0-9]{40}", "pul-"),
    _token("sentry_token", r"sntry[su]_[A-Za-z0-9+/=_]{40,}", "sntry"),
    _token("newrelic_key", r"NRAK-[A-Z0-9]{27}|NRII-[A-Za-z0-9_\-]{32}", "nrak-", "nrii-"),
    _token("mailgun_key", r"key-[a-f0-9]{32}", "key-"),
    _token("age_secret_key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", "age-secret-key-1"),
    _token("docker_hub_token", r"dckr_(?:pat|oat)_[A-Za-z0-9_\-]{27,}", "dckr_"),
    # legacy (pre-1.10) Vault tokens: ``s.`` + 24 characters, mixed case with a digit
    _token(
        "vault_token",
        r"[sbr]\.(?=[A-Za-z0-9]{0,23}[0-9])(?=[A-Za-z0-9]{0,23}[A-Z])(?=[A-Za-z0-9]{0,23}[a-z])[A-Za-z0-9]{24}",
        "s.", "b.", "r.",
    ),
    _token(
        "square_token",
        r"sq0atp-[0-9A-Za-z_\-]{22,}|sq0csp-[0-9A-Za-z_\-]{43}|EAAA[A-Za-z0-9_\-+=]{60,}",
        "sq0",
        "EAAA",
    ),
    _token("azure_client_secret", r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}", "q~"),
    # lore's own API tokens (lore.web.tokens: "lore_" + 32 random bytes, url-safe base64):
    # one pasted into a query must not reach the audit log or the events verbatim.
    _token("lore_api_token", r"lore_[A-Za-z0-9_\-]{43}", "lore_"),
)
