"""``lore skills list|export``: the runbooks the configuration and their front matter mark
as procedures, as Agent Skills (``lore.skills``).

Both read the index as it is (run ``lore sync`` first), as the local user, through the
tool chain's screening, redaction and audit. ``export`` writes one folder per skill
(``SKILL.md`` and ``references/``), the same bytes for the same index, and removes the
folders of an earlier export whose runbook is gone: a skills folder kept in step by CI.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lore.access import local_user
from lore.cli.app import app, say, settings
from lore.errors import ConfigError

if TYPE_CHECKING:
    from lore.skills import Skill, SkillCatalog

skills_app = typer.Typer(
    help="Runbooks as Agent Skills: list them, or export a skills folder.", no_args_is_help=True
)
app.add_typer(skills_app, name="skills")


def _run(folder: Path | None = None) -> list[Skill]:
    from lore.mcp_tools import os_user
    from lore.protocols import Closing
    from lore.resolve import knowledge_search, open_for_inspection
    from lore.skills import SkillCatalog

    current = settings()
    backend, problem = open_for_inspection(current)
    if backend is None:
        raise ConfigError(
            "no index to read skills from: run `lore sync` first (or configure a backend that stores)"
        )
    if problem is not None:
        say(f"warning: {problem}", stderr=True)
    search = knowledge_search(current, backend)
    catalog: SkillCatalog = SkillCatalog(search)
    user = local_user(os_user())
    try:
        if folder is not None:
            return asyncio.run(catalog.export(user, folder))
        return asyncio.run(catalog.listing(user))
    finally:
        search.close()
        if isinstance(backend, Closing):
            backend.close()


@skills_app.command("list")
def list_command(
    json_output: Annotated[
        bool, typer.Option("--json", help="Print each skill's front matter as JSON.")
    ] = False,
) -> None:
    """The skills of the index: name, source runbook and description."""
    skills = _run()
    if json_output:
        typer.echo(json.dumps([skill.frontmatter for skill in skills], indent=2, ensure_ascii=False))
        return
    if not skills:
        say(
            "no skills: mark procedures with `skills = ...` on a source, "
            "or skill/alerts/symptoms in their front matter"
        )
        return
    for skill in skills:
        say(f"{skill.name}  ({skill.uri})")
        say(f"    {skill.description}")


@skills_app.command("export")
def export_command(
    folder: Annotated[
        Path, typer.Argument(metavar="DIR", help="Folder to write one skill folder per runbook into.")
    ],
    holmesgpt: Annotated[
        bool, typer.Option("--holmesgpt", help="Also write DIR/catalog.json, HolmesGPT's runbook catalog.")
    ] = False,
) -> None:
    """Write every skill as DIR/<name>/SKILL.md, long sections in references/.

    Folders of an earlier export whose runbook is gone are removed; folders lore did not
    write are left alone (and never overwritten)."""
    skills = _run(folder)
    if holmesgpt:
        from lore.skills.catalog import write_holmes_catalog

        write_holmes_catalog(skills, folder)
    files = sum(len(skill.files) for skill in skills)
    say(f"exported {len(skills)} skills ({files} files) to {folder}")
