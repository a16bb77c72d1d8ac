"""A cold ``lore search``'s command line read without typer, for the common forms only.

Importing typer (and the click it carries) and building the command from its signature
costs a cold search a few hundredths of a second before it can start its own work. A
command line made only of what this module knows (the root's ``--config``, the command
word, one query, and the search's own options written ``--name value``, ``--name=value``
or ``-x value``) is read here, and ``run_search`` is called as typer would call it;
anything else (``--help``, an unknown or misspelt option, an option without its value,
``--``, a query that starts with ``-``, an option given twice that is not repeatable)
returns None and goes to the typer application, whose answer (help, a usage error)
is then exactly what it always was.

The options' one definition is the typer command (``lore.cli.search_cmd``); the table
below restates their names and kinds, and tests/test_cold_start.py holds it to that
command, so it cannot drift from it unnoticed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["value", "repeatable", "flag"]

#: The root options before the command word: option -> parameter of ``lore.cli.app._root``.
ROOT_OPTIONS: dict[str, str] = {"--config": "config", "-c": "config", "--version": "version"}
#: Root options that end the command themselves (``lore --version``): typer reads them.
ROOT_FLAGS = frozenset({"--version"})
#: The search command's options: option -> (parameter of ``run_search``, kind).
SEARCH_OPTIONS: dict[str, tuple[str, Kind]] = {
    "--top-k": ("top_k", "value"),
    "-k": ("top_k", "value"),
    "--mode": ("mode", "value"),
    "-m": ("mode", "value"),
    "--label": ("label", "repeatable"),
    "-l": ("label", "repeatable"),
    "--json": ("json_output", "flag"),
    "--conversation-id": ("conversation_id", "value"),
    "--message-id": ("message_id", "value"),
    "--trace": ("trace", "repeatable"),
    "--min-confidence": ("min_confidence", "value"),
}
#: The command's one argument.
QUERY = "query"


@dataclass(frozen=True)
class SearchCall:
    config: Path | None
    #: Keyword arguments of ``lore.cli.search_run.run_search``.
    arguments: dict[str, object]


def read(argv: list[str]) -> SearchCall | None:
    """``lore ARGV`` as a search call, or None for typer to read."""
    if not all(word.isascii() or _utf8(word) for word in argv):
        return None  # bytes that are not UTF-8: as click passes them on
    words = iter(argv)
    config: Path | None = None
    for word in words:
        if word == "search":
            break
        if word.partition("=")[0] in ROOT_FLAGS:
            return None
        name, value = _option(word, words, ROOT_OPTIONS)
        if name is None or config is not None or value is None:
            return None
        config = Path(value)
    else:
        return None
    arguments: dict[str, object] = {}
    for word in words:
        if not word.startswith("-"):
            if QUERY in arguments:
                return None  # click: "Got unexpected extra argument"
            arguments[QUERY] = word
            continue
        option = word.partition("=")[0]
        if option not in SEARCH_OPTIONS:
            return None
        parameter, kind = SEARCH_OPTIONS[option]
        if kind == "flag":
            if word != option or parameter in arguments:
                return None
            arguments[parameter] = True
            continue
        _, value = _option(word, words, SEARCH_OPTIONS)
        if value is None:
            return None
        if kind == "repeatable":
            values = arguments.setdefault(parameter, [])
            assert isinstance(values, list)
            values.append(value)
        elif parameter in arguments:
            return None
        else:
            arguments[parameter] = value
    return SearchCall(config, arguments) if QUERY in arguments else None


def _utf8(word: str) -> bool:
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _option(word: str, words: Iterator[str], known: Mapping[str, object]) -> tuple[str | None, str | None]:
    """(option, value) of ``--name value`` or ``--name=value`` (``-x value``), the value
    None where it is missing or looks like an option; (None, None) for an unknown word."""
    option, equals, value = word.partition("=")
    if option not in known or (equals and not option.startswith("--")):
        return None, None
    if equals:
        return option, value
    following = next(words, None)
    if following is None or following.startswith("-"):
        return option, None
    return option, following
