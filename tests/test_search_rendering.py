"""What a person reads from ``lore search`` / ``lore alert`` on a terminal: passages in rank
order (grouping under a document never moves a better passage below a worse one) and code
lines printed whole, never wrapped in the middle of a token."""

from __future__ import annotations

import io
import re

from rich.console import Console

from lore.cli import search_run
from lore.cli.passage_markdown import Piece, pieces
from lore.tool.core import ToolMetadata, ToolPassage, ToolResult

GREP = (
    "kubectl -n payments logs deploy/payments-consumer --since=30m | grep -E "
    "'(OutOfMemoryError|CommitFailedException|RebalanceInProgressException|TimeoutException)' "
    "| sort | uniq -c"
)


def passage(rank: int, uri: str, section: str, text: str = "Some text.") -> ToolPassage:
    return ToolPassage(
        rank=rank, title=uri.rsplit("/", 1)[-1], section=section, uri=uri, score=1.0 / rank, revision="rev",
        text=text, updated_at="2026-01-01T00:00:00+00:00", age_days=1, stale=False, source_type="filesystem",
        chunk_id=f"c{rank}",
    )  # fmt: skip


def render(passages: list[ToolPassage], *, width: int = 100, colours: bool = False) -> str:
    metadata = ToolMetadata(query="q", engine="sqlite", degraded=False, result_count=len(passages), safety={},
                            truncated=False, latency_ms=1.0)  # fmt: skip
    screen = io.StringIO()
    original = search_run.console
    search_run.console = Console(
        file=screen, force_terminal=True, color_system="truecolor" if colours else None, width=width
    )
    try:
        search_run._print_human(ToolResult(passages=passages, metadata=metadata, error=None))
    finally:
        search_run.console = original
    return screen.getvalue()


def test_grouping_by_document_keeps_rank_order() -> None:
    """Ranks 1 and 3 of one document, 2 of another: printed 1, 2, 3 (the first document's
    heading repeated), never 1, 3, 2."""
    out = render(
        [
            passage(1, "runbooks/a.md", "Meaning"),
            passage(2, "vault://lore/b.md", "Symptoms"),
            passage(3, "runbooks/a.md", "Mitigation"),
        ]
    )
    ranks = [int(line.split()[0]) for line in out.splitlines() if re.match(r" ?\d+  \S", line)]
    assert ranks == [1, 2, 3], out


def test_consecutive_passages_of_one_document_share_its_heading() -> None:
    out = render([passage(1, "runbooks/a.md", "Meaning"), passage(2, "runbooks/a.md", "Impact")])
    assert out.count("runbooks/a.md ·") == 1  # one provenance line for the run


def test_a_long_code_line_is_printed_whole_on_a_narrow_terminal() -> None:
    """A 150-character ``grep -E`` on a 60-column terminal: one line, as written (the
    terminal folds or scrolls it; a copy gives the command back), with or without colours."""
    text = f"Look for the errors:\n\n```bash\n{GREP}\n```\n\nThen restart it."
    for colours in (False, True):
        out = render([passage(1, "runbooks/a.md", "Diagnosis", text)], width=60, colours=colours)
        plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
        assert any(line.strip() == GREP for line in plain.splitlines()), out
        assert "Then restart it." in plain


def test_pieces_cut_prose_and_fenced_code() -> None:
    text = "Intro.\n\n```bash\nls -l\n\necho hi\n```\nOutro.\n~~~\nopen fence"
    assert pieces(text) == [
        Piece("Intro."),
        Piece("ls -l\n\necho hi", "bash"),
        Piece("Outro."),
        Piece("open fence", "text"),
    ]
