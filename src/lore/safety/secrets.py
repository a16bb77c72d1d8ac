"""Secret and PII redaction of retrieved text (and of queries before they are audited).

Runbooks collect credentials: a token pasted into a postmortem timeline, a connection
string in a troubleshooting step. Whatever matches is replaced by ``[REDACTED:<kind>]``.

Why a pattern table and not a library: detect-secrets (the obvious candidate) is a
repository scanner. It works line by line through global plugin settings, reports
*that* a line holds a secret rather than the span to replace, and several of its plugins
flag whole lines by keyword. Redacting in place needs exact spans, and a search result
must not lose a whole line of a runbook for a false alarm. The patterns below follow the
providers' documented token formats (the same ones detect-secrets and gitleaks use);
every one has a test that it fires and one that it leaves look-alikes alone (commit
SHAs, UUIDs, base64 of ordinary text, ``<your-password>`` placeholders, k8s names).

A value in a ``key=value`` pair is redacted when the key names a credential (``password``,
``DB_PASSWORD``, ``api_key``; ``token``/``secret`` need a token-like value), or when any
key's value has the shape and entropy of a random token.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass


def redacted(kind: str) -> str:
    return f"[REDACTED:{kind}]"


_PLACEHOLDER_WORDS = frozenset(
    {
        "password", "passwd", "pass", "pwd", "secret", "token", "apikey", "api_key", "key",
        "changeme", "change_me", "redacted", "example", "none", "null", "nil", "true", "false",
        "required", "optional", "empty", "xxx", "todo", "tbd", "n/a", "value", "string",
    }
)  # fmt: skip
_PLACEHOLDER_SHAPES = re.compile(
    r"""^(?:
        [<{\[$%(`].*          # <your-password>, {{ secret }}, [REDACTED], $VAR, %(pw)s, `...`
      | \*+ | \.{2,}.* | (.)\1{3,}   # ****, ..., xxxx
      | (?:your|my|the|some|example)[-_ ]?[a-z_-]*     # your-password, my_token, example
      | .*(?:placeholder|changeme|change[-_]me).*
    )$""",
    re.IGNORECASE | re.VERBOSE,
)
#: Commit SHAs, digests and UUIDs: identifiers, not credentials.
_HEX_ID = re.compile(
    r"^(?:[0-9a-f]{7,64}|[0-9A-F]{7,64}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
)
#: k8s-style resource names (lowercase words joined by dashes/dots: ``payments-api-7d9f8``).
_RESOURCE_NAME = re.compile(r"^[a-z0-9]+(?:[-.][a-z0-9]+)+$")
_WORD_SEGMENT = re.compile(r"(?:^|[-.])[a-z]{3,}(?=$|[-.])")
#: Runs of word-like letters ("Payment", "linux"): common in names and paths, rare in tokens.
_WORDISH_RUN = re.compile(r"[A-Za-z][a-z]{3,}")


def is_placeholder(value: str) -> bool:
    value = value.strip().strip("\"'")
    return not value or value.lower() in _PLACEHOLDER_WORDS or bool(_PLACEHOLDER_SHAPES.match(value))


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _is_resource_name(value: str) -> bool:
    return bool(_RESOURCE_NAME.match(value) and _WORD_SEGMENT.search(value))


def _is_base64_of_text(value: str) -> bool:
    if len(value) % 4 == 1:
        return False
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        try:
            decoded = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        except (binascii.Error, ValueError):
            return False
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        return False
    letters = sum(ch.isalpha() or ch == " " for ch in text)
    return " " in text and letters >= 0.8 * len(text)


def looks_random(value: str, *, min_length: int = 20) -> bool:
    """A value with the shape of a generated token rather than a word, name or id."""
    if len(value) < min_length or _HEX_ID.match(value) or _is_resource_name(value):
        return False
    classes = sum(
        bool(re.search(pattern, value)) for pattern in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]")
    )
    if classes < 2 or (not re.search(r"[0-9]", value) and classes < 3):
        return False
    if value.startswith(("/", "./", "~/")) or "//" in value:
        return False  # a path or a URL
    wordish = sum(len(run) for run in _WORDISH_RUN.findall(value))
    if wordish >= 0.5 * len(value) or _is_base64_of_text(value):
        return False
    return _entropy(value) >= 3.5


# -- the table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    #: From the match to its replacement, or None to keep the match (a look-alike).
    replace: Callable[[re.Match[str]], str | None]


def _whole(kind: str) -> Callable[[re.Match[str]], str]:
    return lambda _match: redacted(kind)


def _group(
    kind: str, group: str, accept: Callable[[str], bool] = lambda v: True
) -> Callable[[re.Match[str]], str | None]:
    """Redact only ``group``; keep the rest of the match (the key, the scheme)."""

    def replace(match: re.Match[str]) -> str | None:
        value = match[group]
        if is_placeholder(value) or not accept(value):
            return None
        start, end = match.span(group)
        whole = match.group(0)
        offset = match.start()
        return whole[: start - offset] + redacted(kind) + whole[end - offset :]

    return replace


_DB_SCHEME = (
    r"postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql|sqlserver|oracle"
    r"|cockroachdb|clickhouse|couchbase"
)
_USER_PASSWORD = r"(?P<user>[^\s:/@?#\[\]]*):(?P<password>[^\s@/?#]+)@"

#: Keys whose value is a secret whatever it looks like (``DB_PASSWORD``, ``x-api-key``).
_STRONG_KEY = (
    r"(?:password|passwd|passphrase|pwd|api[_-]?key|apikey|secret[_-]?key|private[_-]?key"
    r"|client[_-]?secret|access[_-]?token|auth[_-]?token|refresh[_-]?token)"
)
#: Keys that also name non-secrets (``secret: db-creds`` is a k8s Secret's name).
_WEAK_KEY = r"(?:secret|token)"
_KEY_PREFIX = r"(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z0-9_.\-]*?"
_VALUE = r"""(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)'|(?P<bare>[^\s"'&;]+))"""
_SEPARATOR = r"""["']?[ \t]*(?:=|:(?!//))[ \t]*"""


def _keyed(kind: str, accept: Callable[[str], bool]) -> Callable[[re.Match[str]], str | None]:
    def replace(match: re.Match[str]) -> str | None:
        group = next(name for name in ("dq", "sq", "bare") if match[name] is not None)
        return _group(kind, group, accept)(match)

    return replace


def _email(match: re.Match[str]) -> str | None:
    # git@github.com:org/repo is a remote, not a person.
    return None if match["local"].lower() in {"git", "noreply", "no-reply"} else redacted("email")


def _rules(*, emails: bool, phone_numbers: bool) -> list[_Rule]:
    rules = [
        _Rule(
            "private_key",
            re.compile(
                r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
                r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\s+[A-Za-z0-9+/=\s]{40,})",
                re.DOTALL,
            ),
            _whole("private_key"),
        ),
        _Rule(
            "jwt",
            re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
            _whole("jwt"),
        ),
        _Rule(
            "aws_access_key_id",
            re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])"),
            _whole("aws_access_key_id"),
        ),
        _Rule(
            "aws_secret_access_key",
            re.compile(
                r"(?i)(?P<key>aws_?secret_?(?:access_?)?key|secret_?access_?key)[\"']?[ \t]*[:=][ \t]*[\"']?"
                r"(?P<value>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
            ),
            _group("aws_secret_access_key", "value"),
        ),
        _Rule(
            "github_token",
            re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
            _whole("github_token"),
        ),
        _Rule(
            "gitlab_token",
            re.compile(r"\bgl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_\-]{20,}"),
            _whole("gitlab_token"),
        ),
        _Rule("slack_token", re.compile(r"\bxox[baprse]-[A-Za-z0-9-]{10,}"), _whole("slack_token")),
        _Rule(
            "slack_webhook",
            re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{16,}"),
            _whole("slack_webhook"),
        ),
        _Rule(
            "db_connection_string",
            re.compile(rf"\b(?:jdbc:)?(?:{_DB_SCHEME})://{_USER_PASSWORD}", re.IGNORECASE),
            _group("db_connection_string", "password"),
        ),
        _Rule(
            "url_password",
            re.compile(rf"\b[a-z][a-z0-9+.\-]*://{_USER_PASSWORD}", re.IGNORECASE),
            _group("url_password", "password"),
        ),
        _Rule(
            "bearer_token",
            re.compile(r"\bbearer[ \t]+(?P<value>(?=[A-Za-z0-9\-._~+/]*\d)[A-Za-z0-9\-._~+/]{16,}=*)", re.I),
            _group("bearer_token", "value"),
        ),
        _Rule(
            "basic_auth",
            re.compile(r"\bbasic[ \t]+(?P<value>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])", re.I),
            _group("basic_auth", "value", lambda v: ":" in _decode_or_empty(v)),
        ),
        _Rule(
            "password",
            re.compile(rf"{_KEY_PREFIX}{_STRONG_KEY}){_SEPARATOR}{_VALUE}", re.I),
            _keyed("password", lambda v: True),
        ),
        _Rule(
            "password",
            re.compile(rf"(?P<key>--(?:password|passwd|api-key|token))[ \t]+{_VALUE}", re.I),
            _keyed("password", lambda v: True),
        ),
        _Rule(
            "secret",
            re.compile(rf"{_KEY_PREFIX}{_WEAK_KEY}){_SEPARATOR}{_VALUE}", re.I),
            _keyed("secret", lambda v: len(v) >= 16 and not _is_resource_name(v)),
        ),
        _Rule(
            "high_entropy",
            re.compile(
                rf"(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{{0,60}}){_SEPARATOR}"
                r"""["']?(?P<bare>[A-Za-z0-9+/=_\-]{20,})(?![A-Za-z0-9+/=_\-])"""
            ),
            _group("high_entropy", "bare", looks_random),
        ),
    ]
    if emails:
        rules.append(
            _Rule(
                "email",
                re.compile(
                    r"(?<![\w.+-])(?P<local>[A-Za-z0-9._%+-]+)@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
                ),
                _email,
            )
        )
    if phone_numbers:
        rules.append(
            _Rule(
                "phone_number",
                re.compile(
                    r"(?<![\w.+/-])(?:\+\d{1,3}[ .\-]?(?:\(\d{1,4}\)[ .\-]?)?\d{1,4}(?:[ .\-]?\d{2,4}){2,4}"
                    r"|\(\d{3}\)[ .\-]?\d{3}[ .\-]\d{4}|\d{3}[.\-]\d{3}[.\-]\d{4})(?![\w-]|\.\d)"
                ),
                _whole("phone_number"),
            )
        )
    return rules


def _decode_or_empty(value: str) -> str:
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return ""


class SecretRedactor:
    """Replaces secrets (and optionally e-mail addresses and phone numbers) in text."""

    def __init__(self, *, emails: bool = False, phone_numbers: bool = False) -> None:
        self._rules = _rules(emails=emails, phone_numbers=phone_numbers)

    def redact(self, text: str) -> tuple[str, Counter[str]]:
        """``text`` with every finding replaced by ``[REDACTED:<kind>]``, and the count per kind."""
        findings: Counter[str] = Counter()
        for rule in self._rules:
            text = rule.pattern.sub(_counting(rule, findings), text)
        return text, findings


def _counting(rule: _Rule, findings: Counter[str]) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        replacement = rule.replace(match)
        if replacement is None:
            return match.group(0)
        findings[rule.kind] += 1
        return replacement

    return replace


_DEFAULT = SecretRedactor()


def redact_secrets(text: str) -> str:
    """Secrets only (no PII), for log lines and error messages."""
    return _DEFAULT.redact(text)[0]
