"""The MCP Skills extension (``io.modelcontextprotocol/skills``, SEP-2640) as JSON.

Shared by both transports: ``lore.mcp_stdio`` answers these methods itself, and
``lore.mcp_server`` registers them on the SDK's low-level ``Server`` (the installed SDK,
mcp 2.3, has the SEP-2133 extension hooks but no Skills extension of its own, so the
messages are written here, against the specification text in
modelcontextprotocol/ext-skills, ``specification/stable/skills.mdx``):

- capability: ``capabilities.extensions["io.modelcontextprotocol/skills"] = {}`` (no
  ``directoryRead``), beside the ``resources`` capability the extension requires;
- ``skills/list`` -> ``{"skills": [Skill]}``, one page (no ``nextCursor``);
- ``skills/get`` ``{"uri": "skill://<name>/SKILL.md"}`` -> ``{"skill": Skill}``; a uri
  that names no skill the caller may read is ``-32602``, with the same message as one
  that names no skill at all;
- each file a resource ``skill://<name>/<path>`` (``resources/list``, ``resources/read``);
  a ``Skill`` entry is ``{uri, frontmatter, resources: [{uri, digest: "sha256:<hex>", size}]}``.

Results are the caller's own view (its access decides what is in them), so on the
2026-07-28 protocol they are marked ``cacheScope: "private"`` with ``ttlMs: 0``.
"""

from __future__ import annotations

from typing import Any

from lore.access import Principal
from lore.skills.build import SKILL_FILE, Skill
from lore.skills.catalog import SkillCatalog

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
SCHEME = "skill://"
#: Invalid params: the code the extension names for an unknown skill or file.
INVALID_PARAMS = -32602

#: The methods this extension adds, and the resources methods it rides on.
SKILL_METHODS = ("skills/list", "skills/get")
RESOURCE_METHODS = ("resources/list", "resources/read")


class SkillWireError(Exception):
    """A JSON-RPC error to answer with (code, message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def skill_uri(name: str, path: str = SKILL_FILE) -> str:
    return f"{SCHEME}{name}/{path}"


def parse_uri(uri: object) -> tuple[str, str] | None:
    """``skill://<name>/<path>`` -> (name, path); None for anything else."""
    if not isinstance(uri, str) or not uri.startswith(SCHEME):
        return None
    name, _, path = uri[len(SCHEME) :].partition("/")
    if not name or not path or ".." in path.split("/"):
        return None
    return name, path


def entry(skill: Skill) -> dict[str, Any]:
    """The extension's ``Skill`` entry: the SKILL.md uri, its front matter as JSON, and
    every file with its digest and size."""
    return {
        "uri": skill_uri(skill.name),
        "frontmatter": skill.frontmatter,
        "resources": [
            {"uri": skill_uri(skill.name, file.path), "digest": file.digest, "size": file.size}
            for file in skill.files
        ],
    }


def _resource(skill: Skill, path: str) -> dict[str, Any]:
    described: dict[str, Any] = {
        "uri": skill_uri(skill.name, path),
        "name": skill.name if path == SKILL_FILE else path.rsplit("/", 1)[-1],
        "mimeType": "text/markdown",
    }
    if path == SKILL_FILE:
        described["description"] = skill.description
    file = skill.file(path)
    if file is not None:
        described["size"] = file.size
    return described


def _unknown(uri: object) -> SkillWireError:
    return SkillWireError(INVALID_PARAMS, f"No skill is served at {uri}")


class SkillsEndpoint:
    """The extension's methods over a ``SkillCatalog``, as one caller sees them."""

    def __init__(self, catalog: SkillCatalog) -> None:
        self.catalog = catalog

    @property
    def capability(self) -> dict[str, Any]:
        return {}

    async def answer(self, method: str, params: Any, principal: Principal) -> dict[str, Any]:
        """The result of ``method`` (one of ``SKILL_METHODS`` or ``RESOURCE_METHODS``)."""
        params = params if isinstance(params, dict) else {}
        if method == "skills/list":
            return {"skills": [entry(skill) for skill in await self.catalog.listing(principal)]}
        if method == "resources/list":
            skills = await self.catalog.listing(principal)
            return {"resources": [_resource(skill, file.path) for skill in skills for file in skill.files]}
        uri = params.get("uri")
        parsed = parse_uri(uri)
        if method == "skills/get":
            if parsed is None or parsed[1] != SKILL_FILE:
                raise _unknown(uri)
            found = await self.catalog.get(principal, parsed[0])
            if found is None:
                raise _unknown(uri)
            return {"skill": entry(found)}
        if method == "resources/read":
            skill = await self.catalog.get(principal, parsed[0]) if parsed is not None else None
            file = skill.file(parsed[1]) if skill is not None and parsed is not None else None
            if file is None:
                raise SkillWireError(INVALID_PARAMS, f"Resource not found: {uri}")
            return {"contents": [{"uri": uri, "mimeType": "text/markdown", "text": file.text}]}
        raise SkillWireError(-32601, "Method not found")
