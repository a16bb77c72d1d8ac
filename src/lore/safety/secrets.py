"""Secret and PII redaction: of every document before it is chunked, embedded and stored
(``redact_document``, called by sync), and again of everything the tool returns.

Runbooks collect credentials: a token pasted into a postmortem timeline, a connection
string in a troubleshooting step. Whatever matches is replaced by ``[REDACTED:<kind>]``.
Redacting at ingest keeps secrets out of ``lore.db``, the full-text index, the requests
to a remote embedder and the prompts of ``lore eval generate``; redacting whole documents
(not chunks) means a private key split across chunks is removed as one block. The
query-time pass stays as a second layer (an index built by another tool, a new rule).

Detectors, in order (``secret_vendors``, ``secret_rules``):

1. PEM private-key blocks, whole;
2. lore's original vendor rules (JWT, AWS, GitHub, GitLab, Slack), then detect-secrets'
   vendor regexes, then lore's table of the vendor formats detect-secrets lacks;
3. structure: credentials in URLs, ``Bearer``/``Basic`` headers, command-line passwords,
   ``key = value`` pairs whose key names a credential, passwords in prose, hex or base64
   key material under any ``…_key`` name, and random-looking values under any key.

Why detect-secrets, and only its regexes: it is the well-kept, widely used detector with
per-vendor plugins (bc-detect-secrets, Bridgecrew's fork, has fewer: no OpenAI, GitLab,
PyPI or Telegram plugin; the PyPI packages that wrap gitleaks ship its binary, which would
mean a subprocess per document and line/column reports). Its scanner reports lines, so
lore applies the plugins' regexes to whole texts itself, widened to whole tokens; its
keyword and entropy plugins flag whole lines and are replaced by lore's keyed rules, which
know placeholders. Every rule has a test that it fires and one that it leaves look-alikes
alone (commit SHAs, UUIDs, image digests, base64 of ordinary text, checksums).

Changing any rule changes what an index should hold: bump ``REDACTION_VERSION``, which is
part of sync's chunking signature, so the next sync re-chunks (and so re-redacts) every
document.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from collections import Counter
from collections.abc import Sequence

from lore.models import Document
from lore.safety.lazy_regex import compile_later
from lore.safety.secret_context import block_rules, context_rules, continuation
from lore.safety.secret_detector import betterleaks_findings, shared_process
from lore.safety.secret_prose import prose_rules
from lore.safety.secret_rules import (
    PRIVATE_KEY,
    PatternRule,
    Rule,
    pii_rules,
    structural_rules,
    whole,
)
from lore.safety.secret_shapes import is_placeholder, looks_random, redacted
from lore.safety.secret_vendors import EXTRA_VENDORS, library_rules

__all__ = [
    "REDACTION_VERSION",
    "SecretRedactor",
    "is_placeholder",
    "looks_random",
    "prepare_scan",
    "redact_document",
    "redact_secrets",
    "redacted",
]

#: Part of sync's chunking signature: bump it whenever a rule changes what is redacted.
REDACTION_VERSION = "5"

#: Short texts (queries, reasons, errors) whose redaction each redactor remembers, and
#: how many of them.
_REMEMBERED_CHARS = 4096
_REMEMBERED = 1024

_MARKER = compile_later(r"\[REDACTED:([a-z0-9_]+)\]")
#: What the canonical view reads differently from the source in a way a secret rule can
#: care about: numeric entities and the named ones of separators, JSON and ``\\x``
#: escapes, percent-encoded separators (not ``%20``: a URL's spaces hide no key),
#: escaped slashes, shell continuations. Rendering costs a parse; most passages hold none.
_ESCAPED = compile_later(
    r"&#\w+;|&(?:colon|equals|commat|sol|lowbar|period|num);|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}"
    r"|%(?:3[ADad]|40|2[Ff]|5[Ff]|26)|\\/|\\\r?\n"
)


#: A Markdown table's header rule (``|---|:--:|``), on a line of its own.
_TABLE_RULE = compile_later(
    r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*\|(?:[ \t]*:?-{3,}:?[ \t]*\|?)*[ \t]*$", re.MULTILINE
)


def _lore_vendor_rules() -> list[PatternRule]:
    return [
        PatternRule(
            "jwt",
            compile_later(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
            whole("jwt"),
            ("eyj",),
        ),
        PatternRule(
            "aws_access_key_id",
            compile_later(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])"),
            whole("aws_access_key_id"),
            ("akia", "asia", "abia", "acca", "a3t"),
        ),
        PatternRule(
            "aws_secret_access_key",
            compile_later(
                r"(?i)(?P<key>aws_?secret_?(?:access_?)?key|secret_?access_?key)[\"']?[ \t]*[:=][ \t]*[\"']?"
                r"(?P<value>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
            ),
            lambda m: (
                None
                if is_placeholder(m["value"])
                else m.group(0)[: m.start("value") - m.start()] + redacted("aws_secret_access_key")
            ),
            ("secret",),
        ),
        PatternRule(
            "github_token",
            compile_later(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
            whole("github_token"),
            ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        ),
        PatternRule(
            "gitlab_token",
            compile_later(r"\bgl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_\-]{20,}"),
            whole("gitlab_token"),
            ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-"),
        ),
        PatternRule(
            "slack_token", compile_later(r"\bxox[baprse]-[A-Za-z0-9-]{10,}"), whole("slack_token"), ("xox",)
        ),
        PatternRule(
            "slack_webhook",
            compile_later(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{16,}"),
            # an example webhook (``…/XXXXXXXXXXXXXXXXXXXXXXXX``) is left as documentation
            lambda m: None if is_placeholder(m.group(0).rsplit("/", 1)[-1]) else redacted("slack_webhook"),
            ("hooks.slack.com",),
        ),
    ]


class SecretRedactor:
    """Replaces secrets (and optionally e-mail addresses and phone numbers) in text."""

    def __init__(self, *, emails: bool = False, phone_numbers: bool = False) -> None:
        self._line_rules: list[Rule] = [
            *_lore_vendor_rules(),
            *library_rules(),
            *EXTRA_VENDORS,
            *structural_rules(),
            *prose_rules(),
            *pii_rules(emails=emails, phone_numbers=phone_numbers),
        ]
        # Each rule's hints indexed once (``_HintedRules``): a block's test is one C-level
        # scan per distinct hint, not a test per rule; with ~520 hints over ~90 rules, the
        # per-rule Python of the test was most of the cost of redacting a short field (a
        # query, a uri, a title) that no rule matches.
        self._tests = _HintedRules(self._line_rules)
        # The credential-context grammar reads across lines (``.netrc`` records, env
        # pairs, tables, a Secret's ``stringData``, a command and its output): run over
        # the whole text, after the line rules.
        self._whole_tests = _HintedRules([*context_rules(), *block_rules()])
        # A search redacts its query several times (what it shows, what the audit and the
        # events keep, an error's text): the same short text, answered once. The result
        # is a pure function of the text and this redactor's rules; bounded, per instance.
        self._remembered = functools.lru_cache(maxsize=_REMEMBERED)(self._redact_one)

    def redact(self, text: str) -> tuple[str, Counter[str]]:
        """``text`` with every finding replaced by ``[REDACTED:<kind>]``, and the count per kind."""
        if len(text) > _REMEMBERED_CHARS:
            return self.redact_many([text])[0]
        redacted, counts = self._remembered(text)
        return redacted, Counter(dict(counts))

    def _redact_one(self, text: str) -> tuple[str, tuple[tuple[str, int], ...]]:
        redacted, counts = self.redact_many([text])[0]
        return redacted, tuple(counts.items())

    def redact_many(self, texts: Sequence[str]) -> list[tuple[str, Counter[str]]]:
        """Each of ``texts`` as ``redact`` gives it, with one Betterleaks scan for them all:
        one round trip to its worker process for a search's passages, titles and uris,
        not one per field."""
        ruled = [self._redact_rules(text) for text in texts]
        found = _scan([text for text, _ in ruled])
        results = []
        for text, findings in ruled:
            text = _apply_betterleaks(text, found, findings)
            if _ESCAPED.search(text) or _TABLE_RULE.search(text):
                text = self._redact_escaped_lines(text, findings)
            results.append((text, findings))
        return results

    def _redact_escaped_lines(self, text: str, findings: Counter[str]) -> str:
        """The view pass over the runs of lines that hold an escape (and the line a
        continuation joins) and over Markdown tables (the view reads each cell with its
        column's header, ``password: …``, which the grammar's key/value row reads), not
        the whole text: most of a passage reads as written."""
        lines = text.splitlines(keepends=True)
        marked = [bool(_ESCAPED.search(line)) for line in lines]
        for i, line in enumerate(lines[:-1]):
            if line.rstrip("\r\n").endswith("\\"):
                marked[i] = marked[i + 1] = True
        for i, line in enumerate(lines):
            if i and _TABLE_RULE.match(line) and "|" in lines[i - 1]:
                # the header row, the rule, and the rows down to the table's end
                end = i + 1
                while end < len(lines) and "|" in lines[end]:
                    end += 1
                for row in range(i - 1, end):
                    marked[row] = True
        pieces: list[str] = []
        i = 0
        while i < len(lines):
            j = i
            while j < len(lines) and marked[j] == marked[i]:
                j += 1
            run = "".join(lines[i:j])
            pieces.append(self._redact_view(run, findings) if marked[i] else run)
            i = j
        return "".join(pieces)

    def _redact_view(self, text: str, findings: Counter[str]) -> str:
        """What the source pass missed because it was escaped or encoded (``&#112;assword``,
        ``\\u003d``, ``%5F``) or split by a shell continuation: the rules run again over the
        canonical view's rendered layer (``lore.safety.canonical.render``), and each span
        they change there is mapped back to the source and replaced whole."""
        # The Markdown parser behind the view, loaded by the first text that needs it.
        from lore.safety.canonical import render, replace_spans

        view = render(text)
        if view.text == text:
            return text
        redacted_view, found = self._redact_source(view.text)
        if not found:
            return text
        spans = []
        for i1, i2, j1, j2 in _changed(view.text, redacted_view):
            kinds = _MARKER.findall(redacted_view[j1:j2])
            start, end = view.span(i1, i2)
            if end > start and "[REDACTED:" not in text[start:end]:
                spans.append((start, end, redacted(kinds[0] if kinds else "secret")))
        if not spans:
            return text
        findings.update(found)
        return replace_spans(text, spans)

    def _redact_source(self, text: str) -> tuple[str, Counter[str]]:
        text, findings = self._redact_rules(text)
        return _betterleaks(text, findings), findings

    def _redact_rules(self, text: str) -> tuple[str, Counter[str]]:
        """lore's own rules; Betterleaks' run after them."""
        findings: Counter[str] = Counter()
        # Only a PEM block spans lines; every other rule matches within one line, so the
        # rest runs on blocks of whole lines, each skipping the rules none of whose hints
        # it holds (a runbook page through ~80 regexes is otherwise the slow part of sync).
        text = PRIVATE_KEY.apply(text, findings)
        text = "".join([self._tests.apply(block, findings) for block in _blocks(text)])
        text = self._whole_tests.apply(text, findings)
        if "]\\" in text:
            text = continuation(text, findings)
        return text, findings


#: Equal runs shorter than this inside a change are the diff aligning letters of a marker
#: with letters of the secret it replaced ("a", "w" of ``[REDACTED:password]``), not text kept.
_MIN_KEPT = 6


def _changed(before: str, after: str) -> list[tuple[int, int, int, int]]:
    """The regions of ``before`` that ``after`` replaced, with their replacements."""
    regions: list[list[int]] = []
    opcodes = difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
    for n, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal" and (i2 - i1 >= _MIN_KEPT or not regions or n == len(opcodes) - 1):
            continue
        if tag == "equal" or (regions and regions[-1][1] == i1 and regions[-1][3] == j1):
            if regions:
                regions[-1][1], regions[-1][3] = i2, j2
            continue
        regions.append([i1, i2, j1, j2])
    return [(r[0], r[1], r[2], r[3]) for r in regions if r[1] > r[0]]


#: Between the texts of one batched scan: a line of its own holding a control character
#: no rule's value or whitespace class takes, so no match runs from one text into the next.
_BATCH_SEPARATOR = "\n\x1f\n"
#: lore keeps no Betterleaks value shorter than this, so a shorter text needs no scan.
_MIN_VALUE = 8


def _scan(texts: Sequence[str]) -> list[tuple[str, str]]:
    """Betterleaks' findings in ``texts``, from one scan of them all (none when no text
    is long enough to hold a value lore would keep)."""
    worth = [text for text in texts if len(text) >= _MIN_VALUE]
    return betterleaks_findings(_BATCH_SEPARATOR.join(worth)) if worth else []


def prepare_scan(text: str) -> None:
    """Start the secret detector's worker now if redacting ``text`` will scan it: a command
    that is about to redact (a cold search, its query) lets the worker start and build its
    rules while the command imports and opens what it needs, instead of waiting for that
    at its first scan. Nothing is scanned or skipped here: the redaction scans as always."""
    if len(text) >= _MIN_VALUE:
        shared_process().start()


def _betterleaks(text: str, findings: Counter[str]) -> str:
    return _apply_betterleaks(text, _scan([text]), findings)


def _apply_betterleaks(text: str, found: list[tuple[str, str]], findings: Counter[str]) -> str:
    """Betterleaks' vendor rules (the gitleaks successor's, ~200 formats; not its generic
    keyed rule, which lore's keyed rules replace) over what lore's rules left: each value
    it reports is replaced wherever it occurs in ``text`` (``found`` may come from a scan of
    several texts: a value not in this one is not this one's). Chosen by measurement
    (``bench/secret_detectors.py``): beside lore it adds the vendor formats lore has no
    rule for, and flags no passage of the shared corpora. The Go library runs in a worker
    process, never in lore's (``lore/safety/secret_detector.py`` says why)."""
    for rule_id, value in found:
        if rule_id.startswith("generic"):
            continue  # lore's keyed rules do this, knowing placeholders and look-alikes
        # an example (``…/XXXXXXXXXXXXXXXX``) is documentation, as in lore's own vendor rules
        example = is_placeholder(value) or is_placeholder(value.rsplit("/", 1)[-1])
        if len(value) < _MIN_VALUE or example or "[REDACTED:" in value or value not in text:
            continue
        kind = re.sub(r"[^a-z0-9_]", "_", rule_id.lower()) or "secret"
        findings[kind] += text.count(value)
        text = text.replace(value, redacted(kind))
    return text


class _HintedRules:
    """Rules in their order, each run on a text only when it holds one of the rule's hints
    (or the rule has none): the same test as asking each rule in turn, made from one scan
    of the text per distinct hint. A lower-case hint is looked for in the text as given,
    lower-cased; any other in the text as the rules before have left it (a rule that
    redacts changes it), so after a change those are looked for again."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self._rules = tuple(rules)
        self._always = frozenset(i for i, rule in enumerate(rules) if not rule.hints)
        folded: dict[str, set[int]] = {}
        cased: dict[str, set[int]] = {}
        for i, rule in enumerate(rules):
            for hint in rule.hints:
                (folded if hint.islower() else cased).setdefault(hint, set()).add(i)
        self._folded = {hint: frozenset(named) for hint, named in folded.items()}
        self._cased = {hint: frozenset(named) for hint, named in cased.items()}

    def _named(self, hints: dict[str, frozenset[int]], text: str, due: set[int]) -> set[int]:
        for hint in filter(text.__contains__, hints):
            due |= hints[hint]
        return due

    def apply(self, text: str, findings: Counter[str]) -> str:
        """``text`` through every rule whose hint it holds, in the rules' order."""
        named = self._named(self._folded, text.lower(), set(self._always))
        pending = sorted(self._named(self._cased, text, set(named)))
        at = 0
        while at < len(pending):
            index = pending[at]
            changed = self._rules[index].apply(text, findings)
            at += 1
            if changed != text:
                text = changed
                due = self._named(self._cased, text, set(named))
                pending, at = sorted(i for i in due if i > index), 0
        return text


#: Block size for the hint test: small enough that a hint rules out most blocks, large
#: enough that the per-call overhead of ~80 regexes stays small.
_BLOCK_CHARS = 1024


def _blocks(text: str) -> list[str]:
    blocks: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        current.append(line)
        size += len(line)
        if size >= _BLOCK_CHARS:
            blocks.append("".join(current))
            current, size = [], 0
    if current:
        blocks.append("".join(current))
    return blocks


def redaction_markers(text: str) -> Counter[str]:
    """The ``[REDACTED:<kind>]`` markers already in ``text`` (redacted at ingest), per kind."""
    return Counter(_MARKER.findall(text))


@functools.cache
def _default() -> SecretRedactor:
    """The redactor of secrets alone, built on first use: importing this module (which
    every command does, ``lore --help`` too) reads no pattern cache."""
    return SecretRedactor()


def redact_secrets(text: str) -> str:
    """Secrets only (no PII), for log lines and error messages."""
    return _default().redact(text)[0]


def redact_document(document: Document) -> Document:
    """``document`` with secrets (not PII: that is a query-time setting) redacted from its
    text, title and label values (front matter is the author's text too), before sync
    chunks, embeds or stores it."""
    text, found = _default().redact(document.text)
    title, found_in_title = _default().redact(document.title)
    labels = {key: _redact_label(key, value) for key, value in document.labels.items()}
    if not found and not found_in_title and labels == dict(document.labels):
        return document
    return dataclasses.replace(document, text=text, title=title, labels=labels)


def _redact_label(key: str, value: str) -> str:
    """A front-matter value read with its key, as it was written (``db_password: x``):
    the value alone has lost the context that names it a credential."""
    prefix = f"{key}: "
    written, _ = _default().redact(prefix + value)
    if written.startswith(prefix):
        return written[len(prefix) :]
    return _default().redact(value)[0]
