"""The user docs read as a product: current content, no work history, working links, and the
client recipes a newcomer needs to attach an agent.

The user docs are README.md and every docs/*.md. History (dated runs, levers tried) lives in
the results logs under bench/history/, which these checks leave alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

#: About 300 lines of current content each, with a little room for a new table.
PAGE_BUDGET = {"benchmarks.md": 350, "quality.md": 350}

#: How work history leaks into a page: numbered work sessions, issues cited as history,
#: a run's clock time, a branch that was never merged.
_HISTORY = re.compile(
    r"\b[Ss]essions? \d+"
    r"|\b[Tt]his session\b"
    r"|\b[Ii]ssue \d+"
    r"|\(20\d\d-\d\d-\d\d\b(?!, 20\d\d-)"  # a run's date; a list of dated versions is not one
    r"|\b\d\d:\d\d[–-]\d\d:\d\d UTC"
    r"|\bbranch `h/|\bh/[a-z-]+`, not merged"
)

_LINK = re.compile(r"\]\(([^)\s]+)\)")
#: A link quoted in code (an attack's example, a template) is text, not a link.
_CODE_SPAN = re.compile(r"`[^`\n]+`")

MCP_TOOLS = ("knowledge_search", "runbook_for_alert", "knowledge_feedback")


def user_docs(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def history_mentions(text: str) -> list[str]:
    return [match.group(0) for match in _HISTORY.finditer(text)]


def broken_links(doc: Path) -> list[str]:
    """Relative links of a page whose file does not exist (anchors and web links are not checked)."""
    broken = []
    text = _CODE_SPAN.sub("", doc.read_text(encoding="utf-8"))
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path and not (doc.parent / path).exists():
            broken.append(target)
    return broken


def section(text: str, heading: str) -> str:
    """The text under a Markdown heading, to the next heading of the same or a higher level
    (a ``#`` line inside a code block is a comment, not a heading)."""
    lines = text.splitlines()
    fenced = False
    start: int | None = None
    level = 0
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"(#+) (.*)", line)
        if match is None:
            continue
        if start is None and match.group(2).startswith(heading):
            start, level = number + 1, len(match.group(1))
        elif start is not None and len(match.group(1)) <= level:
            return "\n".join(lines[start:number])
    assert start is not None, f"no heading {heading!r}"
    return "\n".join(lines[start:])


@pytest.mark.parametrize("page", sorted(PAGE_BUDGET))
def test_the_measurement_pages_hold_current_content_only(repo_root: Path, page: str) -> None:
    lines = (repo_root / "docs" / page).read_text(encoding="utf-8").splitlines()
    assert len(lines) <= PAGE_BUDGET[page], f"docs/{page}: {len(lines)} lines; move history to bench/history/"


def test_no_user_doc_mentions_work_sessions_or_dated_runs(repo_root: Path) -> None:
    found = {
        doc.name: mentions
        for doc in user_docs(repo_root)
        if (mentions := history_mentions(doc.read_text(encoding="utf-8")))
    }
    assert found == {}


@pytest.mark.parametrize(
    "text",
    [
        "measured in session 17",
        "This session's BM25 query",
        "issue 14's targets hold",
        "(2026-12-06 02:00–02:35 UTC, quiet machine)",
        "the figures (2026-12-01, load average 2.7)",
        "a run at 21:01–21:12 UTC",
        "commit `7deefbd` on branch `h/search-process`, not merged",
    ],
)
def test_the_history_check_catches_each_form(text: str) -> None:
    assert history_mentions(text)


@pytest.mark.parametrize(
    "text",
    [
        "a session cookie, `lore_session`, is HttpOnly",
        "POST /v1/session signs in",
        "the MCP handshake versions 2025-03-26 and 2025-06-18",
        "the `initialize` handshake (2024-11-05, 2025-03-26, 2025-06-18)",
        "updated_at: 2024-05-01T12:30:00+00:00",
        "see the issue tracker",
        "the keyword fallback, updated 2026-12-01 14:05 UTC",
    ],
)
def test_the_history_check_lets_product_words_through(text: str) -> None:
    assert history_mentions(text) == []


def test_the_results_logs_keep_the_history(repo_root: Path) -> None:
    for log in ("benchmarks.md", "quality.md"):
        assert (repo_root / "bench" / "history" / log).stat().st_size > 10_000


def test_links_between_pages_resolve(repo_root: Path) -> None:
    pages = [*user_docs(repo_root), *sorted((repo_root / "bench" / "history").glob("*.md"))]
    found = {str(doc.relative_to(repo_root)): links for doc in pages if (links := broken_links(doc))}
    assert found == {}


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("x", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#part) [web](https://example.org/x) [anchor](#top) "
        "`[quoted](nowhere.md)` [gone](missing.md)",
        encoding="utf-8",
    )
    assert broken_links(page) == ["missing.md"]


def test_quality_keeps_its_current_figures_and_confidence_sections(repo_root: Path) -> None:
    text = (repo_root / "docs" / "quality.md").read_text(encoding="utf-8")
    assert "lore eval" in section(text, "Current figures")
    assert "eval verdict" in section(text, "Confidence")


# The client recipes of docs/integrations.md.


@pytest.fixture(scope="module")
def integrations(repo_root: Path) -> str:
    return (repo_root / "docs" / "integrations.md").read_text(encoding="utf-8")


def test_every_mcp_tool_is_named_and_none_is_called_the_only_one(integrations: str, repo_root: Path) -> None:
    for tool in MCP_TOOLS:
        assert f"`{tool}`" in integrations
    for doc in user_docs(repo_root):
        assert not re.search(r"\bone tool\b", doc.read_text(encoding="utf-8")), doc.name


def test_inspector_recipes_name_lores_config_without_the_inspectors_option(integrations: str) -> None:
    inspector_lines = [
        line for line in integrations.splitlines() if "@modelcontextprotocol/inspector" in line
    ]
    stdio = [line for line in inspector_lines if "lore mcp" in line or "lore -c" in line]
    assert stdio, "no stdio recipe for the MCP Inspector"
    for line in stdio:
        assert "--config" not in line, line
        assert " -c " in line or "LORE_CONFIG=" in line, line


def test_adk_mcp_toolset_names_the_extra_it_needs(integrations: str) -> None:
    assert "McpToolset" in integrations
    assert "google-adk[mcp]" in integrations


@pytest.mark.parametrize(
    ("client", "marker"),
    [
        ("Claude Code", "claude mcp add --transport http"),
        ("MCP Inspector", '--header "Authorization: Bearer'),
        ("Cursor", '"Authorization": "Bearer ${env:LORE_TOKEN}"'),
        ("LangChain", "MultiServerMCPClient"),
        ("Google ADK", "StreamableHTTPConnectionParams"),
        ("HolmesGPT", "mode: streamable-http"),
    ],
)
def test_each_client_has_a_bearer_header_recipe_for_lore_serve(
    integrations: str, client: str, marker: str
) -> None:
    recipes = section(integrations, "`lore serve`'s `/mcp` with a bearer token")
    assert client in recipes
    assert marker in recipes
    # each recipe's block sends the header to lore serve's /mcp
    start = recipes.index(marker)
    block = recipes[recipes.rfind("```", 0, start) : recipes.find("```", start)]
    assert "Authorization" in block, client
    assert "/mcp" in block, client
