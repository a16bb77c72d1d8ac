"""``lore eval verdict``: how good the "no matching knowledge" verdict is on golden sets.

Registered on ``lore eval`` (``lore.cli.eval_app``) when ``lore.cli.eval_cmd`` imports it.
Each question runs once, as the agent tool runs it (hybrid, ``top_k`` from the settings);
see ``lore.eval.verdict``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from lore.cli.app import console
from lore.cli.eval_app import ConfigOption, JsonOption, check_not_empty, close, eval_app, eval_settings
from lore.confidence import Confidence
from lore.errors import ConfigError
from lore.eval.datasets import SPLITS, load_golden_set
from lore.protocols import KnowledgeRetriever
from lore.resolve import open_backend, resolve_embedder, source_weights


@eval_app.command("verdict")
def verdict_command(
    golden_sets: Annotated[
        list[Path], typer.Argument(help="Golden sets (answerable and answerable: false questions).")
    ],
    split: Annotated[
        str | None,
        typer.Option("--split", help="Only this half of each set: calibration or holdout (default: all)."),
    ] = None,
    min_confidence: Annotated[
        str, typer.Option("--min-confidence", help="The verdict's threshold: low, medium or high.")
    ] = "low",
    json_out: JsonOption = None,
    config: ConfigOption = None,
) -> None:
    """Precision and recall of the 'none' verdict, and Hit@5 with the verdict on and off."""
    # Here, not at the top: ``lore --help`` imports every command's module, and the
    # verdict's judge brings the full-text analysis (tantivy) with it.
    from lore.eval.verdict import HIT_K, judge, report

    if split is not None and split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    if min_confidence not in ("low", "medium", "high"):
        raise ConfigError(f"--min-confidence must be low, medium or high, got {min_confidence!r}")
    current = eval_settings(config)
    questions = [q for path in golden_sets for q in load_golden_set(path) if split in (None, q.split)]
    backend = open_backend(current, resolve_embedder(current))
    if backend is None or not isinstance(backend, KnowledgeRetriever):
        raise ConfigError(f"backend {current.backend!r} cannot answer searches")
    try:
        check_not_empty(current, backend)
        judged = asyncio.run(judge(backend, questions, top_k=current.top_k, weights=source_weights(current)))
    finally:
        close(backend)
    result = report(judged, Confidence(min_confidence))
    table = Table(title=f"'none' verdict (min_confidence {min_confidence}, split {split or 'all'})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("answerable / no-answer questions", f"{result.answerable} / {result.unanswerable}")
    table.add_row("none precision", f"{result.precision:.3f}")
    table.add_row("none recall", f"{result.recall:.3f}")
    table.add_row("answerable called none", str(result.false_none))
    table.add_row(f"Hit@{HIT_K} verdict off", f"{result.hit_off:.3f}")
    table.add_row(f"Hit@{HIT_K} verdict on", f"{result.hit_on:.3f}")
    console.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
