"""Google ADK: knowledge_search as an ADK retrieval tool (extra "adk": google-adk), and
the runbooks lore serves as skills as ADK's own ``SkillToolset``.

    from lore.integrations.adk import adk_tools, skill_toolset
    agent = LlmAgent(model="gemini-2.5-flash", name="oncall",
                     tools=[*adk_tools(settings), skill_toolset(settings)])

The tool runs client-side, in this process: ADK hands the model's function call to
``KnowledgeSearchTool.run_async``, which delegates to ``KnowledgeSearch.run``, so the
safety chain and the audit record apply. See the comment above the class for why ADK's
built-in Vertex AI Search grounding must not be used instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from google.adk.features import FeatureName, is_feature_enabled
from google.adk.skills import Frontmatter, Resources
from google.adk.skills import Skill as AdkSkill
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.retrieval.base_retrieval_tool import BaseRetrievalTool
from google.adk.tools.skill_toolset import SkillToolset
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from lore.access import Principal, local_user
from lore.config import LoreSettings
from lore.resolve import build_knowledge_search
from lore.skills import Skill, SkillCatalog
from lore.skills.build import REFERENCES
from lore.tool.core import KnowledgeSearch

T = TypeVar("T")


# Why not ADK's VertexAiSearchTool: it is model built-in grounding. The model retrieves
# server-side, inside Google's serving stack, and the retrieved text goes straight into
# its context; lore never sees it, so prompt-injection screening, secret/PII redaction,
# the output cap and the audit log are all skipped. (Its bypass_multi_tools_limit
# substitute, a Discovery Engine function tool, hands raw results to the model the same
# way.) A corpus kept in Vertex AI Search belongs behind a lore KnowledgeRetriever, under
# the same chain. tests/test_no_vertex_search.py fails if src/ uses the class; comments,
# like this one, cannot import anything and are the only place it may be named.
class KnowledgeSearchTool(BaseRetrievalTool):
    """knowledge_search for ADK agents, with the core's full input schema (query,
    top_k, source_type, labels) rather than the base class's query-only one."""

    def __init__(self, search: KnowledgeSearch) -> None:
        super().__init__(name=search.name, description=search.description)
        self._search = search

    def _get_declaration(self) -> types.FunctionDeclaration:
        schema = self._search.input_schema
        if is_feature_enabled(FeatureName.JSON_SCHEMA_FOR_FUNC_DECL):
            return types.FunctionDeclaration(
                name=self.name, description=self.description, parameters_json_schema=schema
            )
        # Older request path: the Schema object form of the same JSON schema.
        return types.FunctionDeclaration(
            name=self.name,
            description=self.description,
            parameters=types.Schema.from_json_schema(json_schema=types.JSONSchema.model_validate(schema)),
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> dict[str, Any]:
        result = await self._search.run(args, principal=local_user(_user_of(tool_context)))
        # A dict becomes the function response as is; it is the screened, capped result.
        return result.to_dict()


def _user_of(tool_context: ToolContext | None) -> str | None:
    """The session's user id, when the context carries a session (a minimal test or
    evaluation context may not)."""
    try:
        user_id = tool_context.user_id if tool_context is not None else None
    except AttributeError:
        return None
    return str(user_id) if user_id else None


def adk_tools(settings: LoreSettings | None = None) -> list[BaseTool]:
    """``[KnowledgeSearchTool]``, or ``[]`` when no corpus is configured (backend "none")."""
    search = build_knowledge_search(settings)
    return [] if search is None else [KnowledgeSearchTool(search)]


# -- runbooks as ADK skills -------------------------------------------------------------


def to_adk_skill(skill: Skill) -> AdkSkill:
    """One of lore's skills as ADK's own ``Skill`` model: the front matter, the SKILL.md
    body as its instructions, the files under ``references/`` as its references."""
    body = skill.files[0].text.split("---\n", 2)[2].lstrip("\n")
    references: dict[str, str | bytes] = {
        file.path.removeprefix(f"{REFERENCES}/"): file.text
        for file in skill.files[1:]
        if file.path.startswith(f"{REFERENCES}/")
    }
    return AdkSkill(
        frontmatter=Frontmatter.model_validate(skill.frontmatter),
        instructions=body,
        resources=Resources(references=references),
    )


async def adk_skills(catalog: SkillCatalog, principal: Principal) -> list[AdkSkill]:
    """The skills ``principal`` may read, as ADK skills (screened, redacted, audited)."""
    return [to_adk_skill(skill) for skill in await catalog.listing(principal)]


def skill_toolset(
    settings: LoreSettings | None = None, *, principal: Principal | None = None, **options: Any
) -> SkillToolset:
    """ADK's ``SkillToolset`` over the runbooks lore serves as skills: the same skills as
    ``lore skills export`` and the MCP Skills extension, read from the index now (build
    it again after ``lore sync`` to follow the index). ``principal``: whose view (by
    default the local user); ``options`` go to ``SkillToolset`` as they are.

        agent = LlmAgent(model=..., name="oncall", tools=[*adk_tools(settings), skill_toolset(settings)])
    """
    search = build_knowledge_search(settings)
    if search is None:
        return SkillToolset([], **options)
    who = principal if principal is not None else local_user()
    try:
        skills = _run_now(adk_skills(SkillCatalog(search), who))
    finally:
        search.close()
    return SkillToolset(skills, **options)


def _run_now(job: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` that also works from code already running on an event loop (an ADK
    app building its agent inside ``async def main``): then on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(job)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, job).result()
