"""Two exact shortcuts for the chain's regexes: case-insensitive patterns run as
case-sensitive copies over lower-case ASCII text, and the literals a pattern cannot match
without.

Lowered copies. Python's ``re`` compares every character of an ``IGNORECASE`` pattern
through a case mapping, and turns off its literal and character-set shortcuts: the English
override phrases (``lore.safety.override_phrases``, one alternation of ~50 phrases tried at
every word's start) cost about 3.5x as much with the flag as without it, and the chain runs
them over every passage two or three times (as written, over its folded lines, over its
canonical view). So such a pattern is also compiled without the flag, its letters lowered
(``lowered_pattern``), and that copy runs over the text in lower case when the text is ASCII.
Injection screening's rules (``lore.safety.injection``) and redaction's keyed and vendor
rules (``lore.safety.secret_rules.PatternRule``) use the copies so.

Why the copy finds exactly what the pattern finds, on an ASCII text ``t`` and its lower
case ``t.lower()`` (same length, same positions; letters only change case):

- a literal ``c`` under ``IGNORECASE`` matches a character ``x`` when ``x`` lowered equals
  ``c`` lowered (or ``x`` is one of the few non-ASCII characters folded together with
  ``c``, such as the dotless "ı" with "i" or the Kelvin sign with "k", which an ASCII text
  holds none of); on ``t.lower()``, where every ``x`` is already lowered, that is
  ``x == c.lower()``: the copy's literal. A negated literal likewise;
- a character set under ``IGNORECASE`` holds ``x`` when ``x`` lowered is in the set's
  lowered members; the copy's set is the set plus the lower case of each of its upper-case
  letters, which on lowered text holds the same characters; a negated set likewise;
- categories (``\\w``, ``\\s``, ``\\d``), anchors, word boundaries and look-arounds do not
  depend on case, and the copy keeps them as they are; group structure, names and repeats
  are kept too, so the copy backtracks as the pattern does and picks the same alternative.

A pattern that is not case-insensitive as a whole (a ``(?-i:...)`` group in it), with a
non-ASCII literal or range (the other languages' phrases, whose folding under
``IGNORECASE`` reaches characters ``str.lower`` does not), a back-reference, or any
construct not listed above gets no copy (``None``): it runs as it is. Callers run the copy
only over ASCII text with no upper-case letter, and where they need the match over the
text as written they take it with the pattern itself at the position the copy found.

Required literals. ``required_literals`` reads a case-sensitive pattern's structure for
strings of which every match must contain one: a run of literal characters in a sequence
every match goes through, the union over an alternation's branches, what a repeat of at
least one holds. A text that contains none of them cannot match, and the pattern is not
tried (a substring test is one C scan; a pattern of alternations is tried at every
position). Anything the reading does not know (a set, a look-around, an optional part)
requires nothing, so the literals are never more than the pattern needs. Unlike the hand-
written hints of the rules (``_Rule.hints``), nothing here is a judgement of what an attack
must say: the literals are the pattern's own. A case-insensitive pattern gets them from its
lowered copy, for the ASCII text that copy runs on.

Both read ``re``'s parse tree (``re._parser``) and compile one (``re._compiler``): the
standard library's own parser, so a copy is the pattern's own structure, not a re-reading
of its source. Should those internals change, building one fails and every pattern runs as
it is.
"""

from __future__ import annotations

import re
from typing import Any

from lore.safety.lazy_regex import is_lazy

__all__ = ["lowered_copy", "lowered_literals", "lowered_pattern", "required_literals", "selective"]

#: More required literals than this are more scans than the pattern's own try costs.
MAX_LITERALS = 32


class _Unsupported(Exception):
    """A construct the copy does not rewrite: the pattern runs as it is."""


_UPPER_A, _UPPER_Z = ord("A"), ord("Z")


def lowered_pattern(pattern: re.Pattern[str]) -> re.Pattern[str] | None:
    """The case-sensitive copy of ``pattern`` for lower-case ASCII text (module note), or
    None when ``pattern`` is not case-insensitive or holds what the copy cannot rewrite."""
    return lowered_copy(pattern)[0]


def lowered_literals(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """The required literals of ``pattern``'s lowered copy: they hold where the copy runs
    (lower-case ASCII text) and nowhere else."""
    return lowered_copy(pattern)[1]


def lowered_copy(pattern: re.Pattern[str]) -> tuple[re.Pattern[str] | None, tuple[str, ...] | None]:
    """The lowered copy and its required literals, from one reading of ``pattern``
    (``(None, None)`` when it gets no copy)."""
    tree = _lowered_tree(pattern)
    if tree is None:
        return None, None
    literals = _literals_of(tree)
    try:
        from re import _compiler  # type: ignore[attr-defined]

        compiled: re.Pattern[str] = _compiler.compile(tree, tree.state.flags)
    except (ImportError, AttributeError, TypeError, ValueError, re.error):
        return None, None
    return compiled, literals


def _lowered_tree(pattern: re.Pattern[str]) -> Any:
    """The parse tree of the lowered copy (module note), or None."""
    if not isinstance(pattern, re.Pattern) and not is_lazy(pattern):
        return None  # a ``regex`` pattern: another engine, another syntax
    try:
        from re import _constants, _parser  # type: ignore[attr-defined]

        parsed = _parser.parse(pattern.pattern, pattern.flags)
        if not parsed.state.flags & re.IGNORECASE:
            return None
        tree = _Rewriter(_constants, _parser).sequence(parsed)
    except (_Unsupported, ImportError, AttributeError, TypeError, ValueError, re.error):
        return None
    tree.state.flags &= ~re.IGNORECASE
    return tree


class _Rewriter:
    def __init__(self, constants: Any, parser: Any) -> None:
        self.c = constants
        self.parser = parser

    def sequence(self, sub: Any) -> Any:
        return self.parser.SubPattern(sub.state, [self.node(op, av) for op, av in sub.data])

    def node(self, op: Any, av: Any) -> tuple[Any, Any]:
        c = self.c
        if op in (c.LITERAL, c.NOT_LITERAL):
            return op, self.letter(av)
        if op is c.IN:
            return op, self.members(av)
        if op is c.SUBPATTERN:
            group, add, delete, sub = av
            if delete & re.IGNORECASE:
                raise _Unsupported("a case-sensitive group")
            return op, (group, add & ~re.IGNORECASE, delete, self.sequence(sub))
        if op is c.BRANCH:
            return op, (av[0], [self.sequence(branch) for branch in av[1]])
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            low, high, sub = av
            return op, (low, high, self.sequence(sub))
        if op is c.ATOMIC_GROUP:
            return op, self.sequence(av)
        if op in (c.ASSERT, c.ASSERT_NOT):
            direction, sub = av
            return op, (direction, self.sequence(sub))
        if op in (c.AT, c.ANY, c.CATEGORY):
            return op, av
        raise _Unsupported(op)

    @staticmethod
    def letter(code: int) -> int:
        if code >= 128:
            raise _Unsupported(chr(code))
        return code + 32 if _UPPER_A <= code <= _UPPER_Z else code

    def members(self, items: Any) -> list[tuple[Any, Any]]:
        c = self.c
        out: list[tuple[Any, Any]] = []
        for op, av in items:
            if op is c.LITERAL:
                out.append((op, av))
                lowered = self.letter(av)
                if lowered != av:
                    out.append((op, lowered))
            elif op is c.RANGE:
                low, high = av
                if high >= 128:
                    raise _Unsupported(op)
                out.append((op, av))
                out += [(c.LITERAL, code + 32) for code in range(max(low, _UPPER_A), min(high, _UPPER_Z) + 1)]
            elif op in (c.NEGATE, c.CATEGORY):
                out.append((op, av))
            else:
                raise _Unsupported(op)
        return out


def required_literals(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Strings of which every match of ``pattern`` contains one (module note), or None when
    its structure requires none, or ``pattern`` ignores case (``lowered_literals``)."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        parsed = _parser.parse(pattern.pattern, pattern.flags)
    except (ImportError, AttributeError, TypeError, re.error):
        return None
    return None if parsed.state.flags & re.IGNORECASE else _literals_of(parsed)


def selective(literals: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """``literals`` when testing them is cheaper than trying the pattern (a handful of
    scans), else None: a speed choice only; either way the pattern decides."""
    return literals if literals is not None and len(literals) <= MAX_LITERALS else None


def _literals_of(tree: Any) -> tuple[str, ...] | None:
    try:
        from re import _constants  # type: ignore[attr-defined]

        found = _Literals(_constants).sequence(tree.data)
    except (_Unsupported, ImportError, AttributeError):
        return None
    return tuple(sorted(found)) if found else None


class _Literals:
    def __init__(self, constants: Any) -> None:
        self.c = constants

    def sequence(self, items: Any) -> frozenset[str] | None:
        """The best of the requirements of the items every match goes through: a run of
        literal characters, or an item's own."""
        choices: list[frozenset[str]] = []
        run: list[str] = []
        for op, av in items:
            if op is self.c.LITERAL:
                run.append(chr(av))
                continue
            if run:
                choices.append(frozenset(["".join(run)]))
                run = []
            found = self.node(op, av)
            if found:
                choices.append(found)
        if run:
            choices.append(frozenset(["".join(run)]))
        return max(choices, key=_selectivity, default=None)

    def node(self, op: Any, av: Any) -> frozenset[str] | None:
        c = self.c
        if op is c.SUBPATTERN:
            if av[1] & re.IGNORECASE:
                raise _Unsupported("a case-insensitive group")
            return self.sequence(av[3].data)
        if op is c.BRANCH:
            union: set[str] = set()
            for branch in av[1]:
                found = self.sequence(branch.data)
                if not found:
                    return None
                union |= found
            return frozenset(union)
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            return self.sequence(av[2].data) if av[0] >= 1 else None
        if op is c.ATOMIC_GROUP:
            return self.sequence(av.data)
        return None


def _selectivity(literals: frozenset[str]) -> tuple[int, int]:
    """Longer strings are rarer, and fewer are fewer scans."""
    return min(map(len, literals)), -len(literals)
