"""Every ``lore ...`` command line quoted in README.md and docs/*.md names commands and
options that exist, so the docs cannot drift from the CLI unnoticed.

Each line is parsed by the real typer application with ``--help`` appended: click reads
every option name before it runs the eager ``--help``, so an unknown command or option
fails while placeholders (``EVENT_ID``, ``"..."``) and values are never checked or run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lore.cli
from lore.cli.app import app

# Shell blocks only: a bare fence may hold prose that starts with "lore".
_SHELL_BLOCK = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)
_INLINE = re.compile(r"`(lore [^`]+)`")
# Optional environment assignments, then lore (or a path to it), then its arguments.
_COMMAND = re.compile(r"^(?:\$ )?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?lore (?P<args>.*)$")
# Where the lore command line ends: a comment, a pipe, a redirection, another command.
_END = re.compile(r"\s+#|\s(?:\||&&|<|>|2>)\s")
_PLACEHOLDERS = {"...", "…"}


def quoted_command_lines(root: Path) -> list[tuple[str, str]]:
    """(file, line) of every lore command line in the user docs."""
    found: list[tuple[str, str]] = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        candidates = [
            line for block in _SHELL_BLOCK.findall(text) for line in block.replace("\\\n", " ").splitlines()
        ]
        candidates += _INLINE.findall(text)
        for line in candidates:
            match = _COMMAND.match(line.strip())
            if match is not None:
                found.append((doc.name, match.group("args")))
    return found


def arguments(line: str) -> list[str] | None:
    """The argument list of a quoted line; None for prose such as ``lore sync/search``."""
    try:
        words = shlex.split(_END.split(line, maxsplit=1)[0])
    except ValueError:
        return None
    if not words or "/" in words[0]:
        return None
    # "[--sync]" in a synopsis is the option --sync, optional
    return [word.strip("[]") for word in words if word not in _PLACEHOLDERS]


def parses(runner: CliRunner, args: list[str]) -> bool:
    if runner.invoke(app, [*args, "--help"]).exit_code == 0:
        return True
    # "lore serve --host" in prose leaves the option's value out, and --help would be it
    return args[-1].startswith("-") and runner.invoke(app, [*args, "VALUE", "--help"]).exit_code == 0


def test_every_command_line_in_the_docs_parses(repo_root: Path) -> None:
    lore.cli._register_commands()
    runner = CliRunner()
    quoted: dict[tuple[str, ...], str] = {}  # each distinct line once: a parse costs ~0.4 s
    for doc, line in quoted_command_lines(repo_root):
        if (args := arguments(line)) is not None:
            quoted.setdefault(tuple(args), f"{doc}: lore {line}")
    # the extraction itself must not silently stop finding the docs' commands
    assert len(quoted) > 50

    broken = [where for args, where in quoted.items() if not parses(runner, list(args))]

    assert not broken, "\n".join(broken)


@pytest.mark.parametrize(
    "line", ["search etcd --no-such-option", "no-such-command", "eval golden x.yaml --sink"]
)
def test_a_drifted_line_is_caught(line: str) -> None:
    lore.cli._register_commands()
    args = arguments(line)

    assert args is not None
    assert not parses(CliRunner(), args)
