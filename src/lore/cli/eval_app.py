"""The ``lore eval`` command group and what its commands share: the options, the
settings of ``--config`` after the subcommand, closing a backend, and the check that an
index holds the configured sources' documents.

``lore.cli.eval_cmd`` (beir, golden, generate, from-feedback) and
``lore.cli.verdict_cmd`` (verdict) register their commands on ``eval_app``; neither
imports the other's commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from lore.cli.app import app, settings, state
from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.protocols import KnowledgeIndex

eval_app = typer.Typer(
    help="Measure retrieval quality: BEIR benchmarks, golden sets, synthetic golden sets.",
    no_args_is_help=True,
)
app.add_typer(eval_app, name="eval")

JsonOption = Annotated[Path | None, typer.Option("--json", help="Write the metrics as JSON to this file.")]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="lore.toml to read (same as `lore --config`).")
]


def eval_settings(config: Path | None) -> LoreSettings:
    """``--config`` given after the subcommand works like ``lore --config``."""
    if config is not None:
        state.config_file = config
        state.settings = None
    return settings()


def close(backend: Any) -> None:
    closer = getattr(backend, "close", None)
    if callable(closer):
        closer()


def check_not_empty(current: LoreSettings, backend: Any) -> None:
    """An unsynced index would score zero everywhere: say so instead."""
    if not isinstance(backend, KnowledgeIndex) or not current.sources:
        return  # a retrieval-only backend: its contents are not ours to list
    if not any(backend.held(config.name) for config in current.sources):
        raise ConfigError(
            "the index holds no document of the configured sources: run `lore sync` or pass --sync"
        )
