"""Help texts print as written: typer renders them as rich markup, which silently eats a
bracketed word such as ``[events]`` (a config table), so a help text must escape it."""

from __future__ import annotations

import inspect
import re

import typer.main
from typer.testing import CliRunner

import lore.cli
from lore.cli.app import app

#: A bracketed word, escaped (`\[events]` in the source, shown as `[events]`) or not.
_BRACKETED = re.compile(r"\\?(\[[^\]\s]+\])")


def commands(command: object, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    """Every command under ``command`` (typer's click groups keep theirs in ``commands``)."""
    found: list[tuple[tuple[str, ...], object]] = [(path, command)]
    subcommands = getattr(command, "commands", None)
    if isinstance(subcommands, dict):
        for name, subcommand in sorted(subcommands.items()):
            found += commands(subcommand, (*path, name))
    return found


def help_texts(command: object) -> list[str]:
    params = getattr(command, "params", [])
    return [getattr(command, "help", None) or ""] + [getattr(p, "help", None) or "" for p in params]


def test_every_bracketed_word_of_a_help_text_is_shown() -> None:
    lore.cli._register_commands()  # every command module, as `lore --help` does
    runner = CliRunner()
    checked = 0
    for path, command in commands(typer.main.get_command(app)):
        wanted = [word for text in help_texts(command) for word in _BRACKETED.findall(text)]
        if not wanted:
            continue
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"}).output
        flat = " ".join(shown.split())
        for word in wanted:
            checked += 1
            assert word in flat, f"lore {' '.join(path)} --help does not show {word}: escape it as \\{word}"
    assert checked, "no help text holds a bracketed word: the test checks nothing"


def test_every_command_says_what_it_does_in_one_line() -> None:
    """``lore --help`` and a group's ``--help`` list each command with the first paragraph
    of its help; typer's rich help keeps that paragraph's line breaks, so a docstring
    wrapped in the source breaks the listing mid-sentence (the ``reindex`` line did)."""
    lore.cli._register_commands()
    listed = 0
    for path, command in commands(typer.main.get_command(app)):
        text = inspect.cleandoc(getattr(command, "help", None) or "")
        first = text.split("\n\n")[0]
        listed += 1
        assert first, f"lore {' '.join(path)} has no help"
        assert "\n" not in first, (
            f"lore {' '.join(path)}: the help's first paragraph spans lines (a one-line summary, "
            f"then a blank line, then the rest): {first!r}"
        )
    assert listed > 10


def test_version_names_the_installed_distribution() -> None:
    from importlib import metadata

    from lore.errors import DISTRIBUTION

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    try:
        expected = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # a source tree run without installing it
        expected = "unknown"
    assert result.output == f"lore {expected}\n"
