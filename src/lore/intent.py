"""Which section of a runbook a question asks for: its intent against the sections' roles.

Runbooks share a skeleton (Meaning, Impact, Diagnosis, Mitigation; or Symptoms, Checks,
Causes, Fixes), and the sections of one runbook share its vocabulary: the alert's name,
its component, its symptoms. "KafkaConsumerLagHigh is firing, how do I fix it?" therefore
ranks the section that names the alert (Meaning) above the one that answers (Mitigation),
though the question says which it wants. This module reads that intent from a few
unambiguous phrasings (fix / mitigate / resolve, or how to do any act but looking:
"how do I shrink it", "how to defrag etcd"; what causes; why / diagnose / investigate /
how do I check; impact / who is affected) and, within each document, moves the sections
whose heading has the matching role ahead of that document's other sections (for a
question for causes: its Causes, then its Diagnosis or Checks).

A fourth intent has no phrasing but a shape: an alert notification (``[FIRING:1]
KafkaConsumerLagHigh …``) or a bare statement of a condition (an alert's description, "There
are 3 unhealthy distributor(s)", an error message pasted from a log) asks what is happening,
and the section that says what the alert or symptom means (Meaning, Symptoms, Description,
Overview) answers it. Without this, the sections of the runbook compete on the wording they
share: the statement's words are the alert's, and Impact, Diagnosis and Mitigation repeat
them, so which one came first was a coin toss between near-equal scores in every channel
(docs/quality.md, "Section order"). A question (a question mark, or a question word first)
is not a statement: "what is the lag threshold?" keeps the retriever's order.

Only the order inside a document changes: each document keeps the ranks its passages held,
so document-level rankings (and every document metric) are exactly what retrieval gave.
A question without such a phrasing, or a document without such a section, is untouched.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

from lore.models import SECTION_SEPARATOR, Passage


class Role(enum.Enum):
    REMEDY = "remedy"
    CAUSE = "cause"
    DIAGNOSIS = "diagnosis"
    IMPACT = "impact"
    MEANING = "meaning"


#: Acts of looking ("how do I check / find / tell …": the Diagnosis's, below) and light
#: verbs that name no act of their own ("how do I get / make / use …"): any other act a
#: question asks how to do is asked for its procedure.
_LOOKING = (
    r"(?:check|see|tell|find|know|verify|confirm|investigat\w*|debug\w*|diagnos\w*|troubleshoot\w*|"
    r"understand|read|interpret|monitor|measure|view|list|look|detect|spot|notice|identify|"
    r"be|get|make|use|do|work)"
)

#: What a question asks for, by its phrasing (first match wins, in this order).
_INTENTS: tuple[tuple[Role, re.Pattern[str]], ...] = (
    (
        Role.REMEDY,
        re.compile(
            r"\b(?:fix|fixing|mitigat\w*|remediat\w*|resolv\w*|workaround|get rid of|"
            r"bring (?:\w+ ){1,3}?(?:down|back)|"
            r"how (?:do|can|should) (?:i|we) (?:stop|recover|restore|repair|renew|rotate|unblock)|"
            r"what (?:do|should|can) (?:i|we) do|"
            # any other act asked for ("how do I shrink it", "how to defrag etcd safely"):
            # its procedure, unless the act is looking (those are the Diagnosis's, below)
            rf"how (?:(?:do|can|should) (?:i|we) |to )(?!{_LOOKING}\b)[a-z]\w+)\b",
            re.IGNORECASE,
        ),
    ),
    (
        # A question for causes: "what causes", "what could cause", "what's causing".
        Role.CAUSE,
        re.compile(
            r"\b(?:what(?:'s| is| are| could| might| can| would)? (?:the )?(?:caus\w*|reasons?)|"
            r"(?:possible|likely|common|root) (?:causes?|reasons?))\b",
            re.IGNORECASE,
        ),
    ),
    (
        Role.DIAGNOSIS,
        re.compile(
            r"\b(?:why|diagnos\w*|investigat\w*|troubleshoot\w*|debug\w*|find out|"
            r"how (?:do|can) (?:i|we) (?:check|see|tell|find))\b",
            re.IGNORECASE,
        ),
    ),
    (Role.IMPACT, re.compile(r"\b(?:impact\w*|who is affected|what breaks|consequences?)\b", re.IGNORECASE)),
    (
        Role.MEANING,
        re.compile(r"\bwhat (?:does|do) (?:\S+ ){1,6}?mean\b|\bwhat is (?:this|the) alert\b", re.IGNORECASE),
    ),
)
#: An alert notification as Alertmanager and its receivers render one: its words are the
#: alert's description (which may say "resolve" or "investigate"), not the asker's.
_NOTIFICATION = re.compile(r"\[(?:FIRING|RESOLVED)\b|\balertname\s*[=:]", re.IGNORECASE)

#: A question rather than a statement: a question mark, or a question word (or an
#: imperative a search is phrased with) first.
_QUESTION = re.compile(
    r"\?|^\s*(?:how|what|why|which|who|whom|whose|when|where|is|are|was|were|do|does|did|can|could|"
    r"should|would|will|shall|may|must|has|have|show|list|find|give|explain|tell|describe)\b",
    re.IGNORECASE,
)
#: Fewer words than this are a topic to look up ("kafka lag"), not a statement.
STATEMENT_WORDS = 4

#: Headings that play each role (the last heading of a section path, lower case, its
#: leading words compared: "Mitigation steps", "Fixes", "Checks and commands").
_ROLES: dict[Role, re.Pattern[str]] = {
    Role.REMEDY: re.compile(
        r"^(?:mitigat\w*|remediat\w*|fix\w*|resolution|resolv\w*|recover\w*|workaround\w*|solutions?|"
        r"how to fix|rotation|rollback|restore)\b"
    ),
    Role.CAUSE: re.compile(r"^(?:(?:root|possible|likely|common|probable) )?causes?\b"),
    Role.DIAGNOSIS: re.compile(
        r"^(?:diagnos\w*|checks?|investigat\w*|troubleshoot\w*|debug\w*|"
        r"(?:(?:root|possible|likely|common|probable) )?causes?|how to investigate)\b"
    ),
    Role.IMPACT: re.compile(r"^(?:impact\w*|consequences?|blast radius)\b"),
    Role.MEANING: re.compile(
        r"^(?:meaning|symptoms?|description|overview|what (?:this|the) alert means|"
        r"what does this alert mean|about this alert)\b"
    ),
}


def intent(question: str) -> Role | None:
    """The role of the section a question asks for, when its phrasing (or, for a
    statement of a condition, its shape) says so."""
    if _NOTIFICATION.search(question):
        return Role.MEANING
    return phrasing(question) or (Role.MEANING if is_statement(question) else None)


def phrasing(question: str) -> Role | None:
    """The role a question's phrasing asks for ("how do I fix", "why"), shape aside."""
    for role, pattern in _INTENTS:
        if pattern.search(question):
            return role
    return None


def is_statement(text: str) -> bool:
    """Whether ``text`` states a condition (an alert's description, an error message)
    rather than asks a question or names a topic."""
    return len(text.split()) >= STATEMENT_WORDS and not _QUESTION.search(text)


#: A role whose sections a document may lack, and the role that answers in their stead: a
#: question for causes takes a Causes section first, then the Diagnosis / Checks.
_FALLBACK = {Role.CAUSE: Role.DIAGNOSIS}


def plays(passage: Passage, role: Role) -> bool:
    """Whether the passage's section (its last heading, or one above it) has ``role``."""
    return _section_plays(passage.section, role)


@lru_cache(maxsize=4096)
def _section_plays(section: str, role: Role) -> bool:
    """``plays`` of a section path: a pure function of it, remembered by its whole value
    (the same sections come back search after search, each asked of up to three roles)."""
    headings = [part.strip().lower() for part in section.split(SECTION_SEPARATOR) if part.strip()]
    return any(_ROLES[role].search(heading) for heading in headings)


def by_intent(passages: Sequence[Passage], question: str, role: Role | None = None) -> list[Passage]:
    """``passages`` with, inside each document, the sections the question asks for (or
    ``role``'s, when given) moved to the front of that document's ranks; each rank keeps
    its score, so scores still fall."""
    role = role or intent(question)
    if role is None:
        return list(passages)
    positions: dict[str, list[int]] = {}
    for index, passage in enumerate(passages):
        positions.setdefault(passage.uri, []).append(index)
    ordered = list(passages)
    for indices in positions.values():
        members = [passages[i] for i in indices]
        roles = (role, _FALLBACK[role]) if role in _FALLBACK else (role,)
        tiers = [[p for p in members if plays(p, r) and not any(plays(p, f) for f in roles[:n])]
                 for n, r in enumerate(roles)]  # fmt: skip
        wanted = [p for tier in tiers for p in tier]
        if not wanted or len(wanted) == len(members):
            continue
        rest = [p for p in members if not any(plays(p, r) for r in roles)]
        for index, passage in zip(indices, [*wanted, *rest], strict=True):
            ordered[index] = (
                passage
                if passage.score == passages[index].score
                else replace(passage, score=passages[index].score)
            )
    return ordered
