"""Output cap: no passage and no result grows past its character budget.

An agent's context is finite and a runaway document (a pasted log, a huge table) must not
crowd out everything else. Truncation is always visible: a marker in the text, and
``truncated`` in the result's metadata. The cap runs after redaction, so cutting a text
can never expose part of a secret that a whole-token pattern would have caught.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: A passage cut shorter than this is not worth showing: the rest are dropped instead.
MIN_USEFUL_CHARS = 200


def truncation_marker(removed: int) -> str:
    return f" … [lore: truncated, {removed} more characters]"


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` in at most ``limit`` characters, marker included. Cuts at a word
    boundary when one is near, so a word is not sliced in half."""
    if len(text) <= limit:
        return text, False
    marker = truncation_marker(len(text))  # the longest the count can be
    keep = limit - len(marker)
    if keep <= 0:
        return text[:limit], True
    space = text.rfind(" ", keep - keep // 5, keep)
    if space > 0:
        keep = space
    kept = text[:keep].rstrip()
    return kept + truncation_marker(len(text) - len(kept)), True


@dataclass(frozen=True)
class CappedTexts:
    #: The surviving texts in their original order; passages past the budget are dropped.
    texts: list[str]
    truncated: bool


def cap_passages(texts: Sequence[str], *, max_passage_chars: int, max_result_chars: int) -> CappedTexts:
    """Cap each text at ``max_passage_chars`` and their sum at ``max_result_chars``.

    Best-ranked passages are kept whole first; the one that crosses the budget is cut,
    and the rest are dropped (rather than all cut to slivers)."""
    kept: list[str] = []
    truncated = False
    budget = max_result_chars
    for index, text in enumerate(texts):
        limit = min(max_passage_chars, budget)
        if kept and limit < min(len(text), MIN_USEFUL_CHARS):
            truncated = True  # passages index.. are dropped
            break
        capped, cut = cap_text(text, limit)
        kept.append(capped)
        truncated = truncated or cut
        budget -= len(capped)
        if budget <= 0 and index + 1 < len(texts):
            truncated = True
            break
    return CappedTexts(texts=kept, truncated=truncated)
