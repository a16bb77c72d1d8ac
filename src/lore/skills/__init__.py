"""Runbooks as Agent Skills: a team's procedures served and exported as skills.

A procedure with a known trigger ("etcdNoLeader fires -> these six steps") is better
loaded whole, by name, than retrieved a chunk at a time. lore already holds each
runbook, its sections, the alerts it answers, who may read it and how old it is, so it
turns the runbooks the configuration or their front matter mark (``select``) into Agent
Skills (``build``: ``SKILL.md`` per agentskills.io, long sections in ``references/``),
and offers them three ways, all through one ``SkillCatalog`` (``catalog``):

- ``lore skills export DIR``: a folder per skill, byte for byte the same for the same
  index, for Claude Code's skills folder or a repository kept in step by CI;
- MCP: the Skills extension (``wire``) on ``lore mcp`` (stdio and ``--http``) and
  ``lore serve``'s ``/mcp``;
- Google ADK: ``lore.integrations.adk.skill_toolset``.

One trust boundary: every path reads through the catalog, which filters by the caller's
``Principal`` with search's access rule and shows text only through the tool chain's
screening, redaction and audit (``KnowledgeSearch.show_stored``). Skills are built from
the index at each call, never cached, so they follow ``lore sync``. The alert path
(``runbook_for_alert``, ``lore alert``) names the skill of each runbook it points at.
"""

from lore.skills.build import Skill, SkillFile, build_skill
from lore.skills.catalog import SkillCatalog, reader_of, write_skills
from lore.skills.select import SkillRules, is_skill, skill_names, skill_rules

__all__ = [
    "Skill",
    "SkillCatalog",
    "SkillFile",
    "SkillRules",
    "build_skill",
    "is_skill",
    "reader_of",
    "skill_names",
    "skill_rules",
    "write_skills",
]
