"""No code in src/ may use model built-in Vertex AI Search grounding.

ADK's VertexAiSearchTool (and google-genai's VertexAISearch retrieval config under it)
make the model retrieve server-side: the retrieved text reaches the model without passing
lore's injection screening, redaction, output cap or audit log. The check tokenizes every
module and looks at code and string tokens only, so an explanatory comment (see
lore/integrations/adk.py) is allowed while an import, an attribute use or a
``getattr(module, "...")`` lookup is not.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

FORBIDDEN = ("VertexAiSearchTool", "VertexAISearch")
#: f-strings are one STRING token before Python 3.12 and split into parts from 3.12 on.
_TEXT_TOKENS = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def forbidden_uses(source: str) -> list[tuple[int, str]]:
    """(line, token) for every non-comment token naming a forbidden class."""
    hits: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        names_it = token.type == tokenize.NAME and token.string in FORBIDDEN
        mentions_it = token.type in _TEXT_TOKENS and any(name in token.string for name in FORBIDDEN)
        if names_it or mentions_it:  # COMMENT tokens are neither
            hits.append((token.start[0], token.string))
    return hits


def test_src_never_uses_vertex_ai_search_grounding(repo_root: Path) -> None:
    modules = sorted((repo_root / "src").rglob("*.py"))
    assert modules, "src/ has no Python modules to scan"
    offences = [
        f"{path.relative_to(repo_root)}:{line}: {text}"
        for path in modules
        for line, text in forbidden_uses(path.read_text(encoding="utf-8"))
    ]
    assert not offences, (
        "model built-in Vertex AI Search bypasses lore's safety chain and audit; use the "
        "knowledge_search tool (lore.integrations.adk.KnowledgeSearchTool) instead:\n" + "\n".join(offences)
    )


@pytest.mark.parametrize(
    "code",
    [
        "from google.adk.tools import VertexAiSearchTool\n",
        "from google.adk.tools.vertex_ai_search_tool import VertexAiSearchTool as V\n",
        "import google.adk.tools as t\ntool = t.VertexAiSearchTool(data_store_id='x')\n",
        "tool = getattr(tools, 'VertexAiSearchTool')\n",
        "from google.genai import types\nr = types.Retrieval(vertex_ai_search=types.VertexAISearch())\n",
        '"""Wraps VertexAiSearchTool."""\n',
        'name = f"{prefix}VertexAiSearchTool"\n',
    ],
)
def test_check_catches_code_uses(code: str) -> None:
    assert forbidden_uses(code)


@pytest.mark.parametrize(
    "code",
    [
        "# VertexAiSearchTool retrieves server-side and bypasses the safety chain.\n",
        "x = 1  # not VertexAISearch either\n",
        "from google.adk.tools.retrieval.base_retrieval_tool import BaseRetrievalTool\n",
        "spec = types.VertexAISearchDataStoreSpec\n",
    ],
)
def test_check_allows_comments_and_other_names(code: str) -> None:
    assert not forbidden_uses(code)
