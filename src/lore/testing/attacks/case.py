"""The planted case record and the spellings attack texts are built with."""

from __future__ import annotations

from dataclasses import dataclass

#: A host for exfiltration URLs; ``.example`` is reserved and never resolves.
EVIL_HOST = "evil.example"


@dataclass(frozen=True)
class PlantedCase:
    name: str
    #: The finding kind the safety chain reports for it.
    kind: str
    text: str
    #: Strings that must not appear in anything an agent receives (case-insensitive, and
    #: also after NFKC with default-ignorable code points removed, as a model reads them).
    payloads: tuple[str, ...]
    #: The document's title (its H1) and the case's section heading, when the attack is
    #: planted there rather than in the body; None: an ordinary title / "Procedure".
    title: str | None = None
    section: str | None = None

    @property
    def query(self) -> str:
        """A word only this case's document contains."""
        return "planted" + self.name.replace("_", "")


def tags(text: str) -> str:
    """ASCII hidden as invisible Unicode tag characters ("ASCII smuggling")."""
    return "".join(chr(0xE0000 + ord(ch)) for ch in text)


def fullwidth(text: str) -> str:
    """ASCII letters and punctuation as their fullwidth forms (U+FF01..U+FF5E)."""
    return "".join(chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in text)


def math_bold(text: str) -> str:
    """Latin letters as MATHEMATICAL BOLD letters (U+1D400...)."""
    return "".join(
        chr(0x1D400 + ord(ch) - ord("A")) if "A" <= ch <= "Z"
        else chr(0x1D41A + ord(ch) - ord("a")) if "a" <= ch <= "z"
        else ch
        for ch in text
    )  # fmt: skip
