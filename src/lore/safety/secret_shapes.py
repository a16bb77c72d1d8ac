"""What a secret looks like, and what merely looks like one.

Shared by the rule tables (``secret_rules``, ``secret_vendors``): placeholders
(``<your-password>``, ``${DB_PASSWORD}``) are never redacted, and a value under an
arbitrary key is redacted only when it has the shape and entropy of a generated token
rather than of a word, a path, a k8s name, a commit SHA, a UUID or base64 of prose.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter

from lore.safety.lazy_regex import compile_later


def redacted(kind: str) -> str:
    return f"[REDACTED:{kind}]"


_PLACEHOLDER_WORDS = frozenset(
    {
        "password", "passwd", "pass", "pwd", "secret", "token", "apikey", "api_key", "key",
        "changeme", "change_me", "redacted", "example", "none", "null", "nil", "true", "false",
        "required", "optional", "empty", "xxx", "todo", "tbd", "n/a", "value", "string",
        # prose after "password:": "password: it should be in 1Password"
        "it", "is", "see", "ask", "use", "from", "in", "on", "at", "to", "stored", "should", "will",
        "must", "not", "set", "this", "that", "same", "as", "above", "below", "generated", "random",
    }
)  # fmt: skip
_PLACEHOLDER_SHAPES = compile_later(
    r"""^(?:
        [<{\[$%(`].*          # <your-password>, {{ secret }}, [REDACTED], $VAR, %(pw)s, `...`
      | \*+ | \.{2,}.* | (.)\1{2,}   # ****, ..., xxx
      | (?:your|my|the|some|example)[-_ ]?[a-z_-]*     # your-password, my_token, example
      | .*(?:placeholder|changeme|change[-_]me|[-_]here|[-_]value|from[-_]vault|get[-_]me).*
      | [a-z]+(?:[-_][a-z]+)*[-_](?:password|passwd|secret|token|key)(?:[-_][a-z]+)*  # wrong-password
      | (?:/|\./|~/)[\w.\-/]*/[\w.\-]+    # a file path: where the secret is, not the secret
      | [\w.\-/]+\.(?:key|pem|crt|cer|der|p12|pfx|jks|json|txt|ya?ml|env|gpg|asc|kdbx)  # a file name
      | [A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\(.*    # code: Devise.friendly_token.first(16)
    )$""",
    re.IGNORECASE | re.VERBOSE,
)
#: Commit SHAs, digests, UUIDs and ULIDs: identifiers, not credentials.
_HEX_ID = compile_later(
    r"^(?:[0-9a-f]{7,64}|[0-9A-F]{7,64}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|[0-7][0-9A-HJKMNP-TV-Z]{25})$"
)
#: k8s-style resource names (lowercase words joined by dashes/dots: ``payments-api-7d9f8``).
_RESOURCE_NAME = compile_later(r"^[a-z0-9]+(?:[-._][a-z0-9]+)+$")
_WORD_SEGMENT = compile_later(r"(?:^|[-._])[a-z]{3,}(?=$|[-._])")
#: Runs of word-like letters ("Payment", "linux"): common in names and paths, rare in tokens.
_WORDISH_RUN = compile_later(r"[A-Za-z][a-z]{3,}")
#: Lowercase words between separators ("sidekiq" in ``k8s_sidekiq_gitlab-…``).
_WORD_PART = compile_later(r"(?:^|(?<=[-_./:]))[a-z]{4,}(?=$|[-_./:])")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def is_placeholder(value: str) -> bool:
    value = value.strip().strip("\"'")
    return not value or value.lower() in _PLACEHOLDER_WORDS or bool(_PLACEHOLDER_SHAPES.match(value))


def _is_identifier(value: str) -> bool:
    """Names and ids built of words and hex (container names, ``TOTP_91FEC9…`` field
    names, ``659b165e985bfdb1-PDX`` ray ids, ``refs/keep-around/<sha>``): random tokens
    hold neither two separated words nor mostly hex digits."""
    if len(_WORD_PART.findall(value)) >= 2:
        return True
    alnum = [ch for ch in value if ch.isalnum()]
    return bool(alnum) and sum(ch in _HEX_DIGITS for ch in alnum) >= 0.8 * len(alnum)


def is_base64_of_text(value: str) -> bool:
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
    if not text.isprintable():
        return False
    letters = sum(ch.isalpha() or ch == " " for ch in text)
    if " " in text and letters >= 0.8 * len(text):
        return True
    # a hostname or a path: words of letters joined by dots, dashes, slashes
    return sum(len(run) for run in re.findall(r"[a-z]{3,}", text)) >= 0.6 * len(text)


def entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def is_resource_name(value: str) -> bool:
    return bool(_RESOURCE_NAME.match(value) and _WORD_SEGMENT.search(value))


def looks_random(value: str, *, min_length: int = 20) -> bool:
    """A value with the shape of a generated token rather than a word, name or id."""
    if len(value) < min_length or _HEX_ID.match(value) or is_resource_name(value) or _is_identifier(value):
        return False
    classes = sum(
        bool(re.search(pattern, value)) for pattern in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]")
    )
    if classes < 2 or (not re.search(r"[0-9]", value) and classes < 3):
        return False
    if value.startswith(("/", "./", "~/")) or "//" in value:
        return False  # a path or a URL
    wordish = sum(len(run) for run in _WORDISH_RUN.findall(value))
    if wordish >= 0.5 * len(value) or is_base64_of_text(value):
        return False
    return entropy(value) >= 3.5


def decode_base64(value: str) -> str:
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return ""
