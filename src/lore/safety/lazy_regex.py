"""Regexes compiled on first use, for the redaction rules.

The rules are some two hundred regexes, and compiling them all was most of what
importing ``lore.safety.secrets`` cost a cold ``lore search`` (which redacts its query and
little else when its passages' chain results were kept at sync). Every rule is tried only
on a text holding one of its hints, so a short text such as a query reaches a handful of
them: a pattern made by ``compile_later`` is compiled the first time it is used, and then
answers as the compiled pattern does (its methods are put on it, so later calls go
straight to them). The result of every match is the compiled pattern's own, so what a
rule redacts does not change; a pattern that does not compile fails on first use instead
of at import (every rule has its own tests).
"""

from __future__ import annotations

import re
from typing import Any, cast

#: What a rule asks of a pattern, put on the lazy pattern once it is compiled.
_FORWARDED = (
    "sub", "subn", "search", "match", "fullmatch", "finditer", "findall", "split", "scanner",
    "flags", "groups", "groupindex",
)  # fmt: skip


class _LazyPattern:
    def __init__(self, source: str, flags: int) -> None:
        #: As ``re.Pattern.pattern``: the source, readable without compiling it.
        self.pattern = source
        self._flags = flags

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the instance does not hold yet: the first use. Private and
        # special names are not the pattern's (copy and pickle ask for them).
        if name.startswith("_"):
            raise AttributeError(name)
        compiled = re.compile(self.pattern, self._flags)
        for forwarded in _FORWARDED:
            setattr(self, forwarded, getattr(compiled, forwarded))
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"compile_later({self.pattern!r}, {self._flags!r})"


def is_lazy(pattern: object) -> bool:
    """Whether ``pattern`` was made by ``compile_later`` (a pattern of ``re``'s syntax)."""
    return isinstance(pattern, _LazyPattern)


def compile_later(source: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile(source, flags)``, done on the pattern's first use."""
    return cast("re.Pattern[str]", _LazyPattern(source, flags))
