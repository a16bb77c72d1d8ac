"""A tiny synced corpus for the agent entry-point tests (MCP, ADK, OpenAI, LangChain).

Each module writes its own runbooks but shares how the config is written, synced and
how the audit log is read back, so the entry points are tested over the same setup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lore.config import load_settings
from lore.sync import run_sync

ETCD_RUNBOOK = (
    "---\ntitle: etcd has no leader\n---\n# etcd has no leader\n\n## Meaning\n\n"
    "The alert etcdNoLeader fires when a member reports no leader.\n"
)


def write_config(root: Path, runbooks: Mapping[str, str], *, backend: str = "sqlite") -> Path:
    """A lore.toml over ``runbooks`` (file name -> text) with the hashing embedder."""
    corpus = root / "runbooks"
    corpus.mkdir(parents=True, exist_ok=True)
    for name, text in runbooks.items():
        (corpus / name).write_text(text, encoding="utf-8")
    config = root / "lore.toml"
    config.write_text(
        f'backend = "{backend}"\ndb_path = "lore.db"\nembedder = "hashing"\naudit_path = "audit.jsonl"\n\n'
        # The corpus alone: the playbook pack (tests/test_vault*.py) would compete for its queries.
        "[vault]\nenabled = false\n\n"
        '[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "runbooks"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    return config


def synced_config(root: Path, runbooks: Mapping[str, str]) -> Path:
    config = write_config(root, runbooks)
    report = run_sync(load_settings(config))
    assert report.ok, report.failures
    return config


def audit_entries(config: Path) -> list[dict[str, Any]]:
    """Every audit record written beside ``config`` so far (none: an empty list)."""
    path = config.parent / "audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
