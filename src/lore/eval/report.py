"""Show an evaluation (rich tables), write it (JSON, TREC run files) and defend a baseline.

A baseline file is the JSON of a run plus a tolerance::

    {"tolerance": 0.02, "embedder": "...", "modes": {"hybrid": {"metrics": {"hit@1": 0.9, ...}}}}

``check_baseline`` fails a metric that dropped by more than the tolerance (absolute,
metrics being fractions in [0, 1]); improvements never fail.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lore.errors import ConfigError, DatasetError
from lore.eval.metrics import METRICS, SECTION_METRICS
from lore.eval.runner import EvalRun, trec_run_lines

DEFAULT_TOLERANCE = 0.02


def render_run(console: Console, run: EvalRun) -> None:
    """One table, modes side by side, the best value of each metric in bold; then the
    unanswerable questions with what each mode put at rank 1."""
    console.print(
        f"[bold]{run.dataset}[/bold]: {run.queries} queries, "
        f"engine {run.engine}, embedder {run.embedder or '?'}",
        highlight=False,
    )
    table = Table()
    table.add_column("metric")
    for result in run.results:
        table.add_column(result.mode, justify="right")
    names = [*METRICS, *(name for name in SECTION_METRICS if all(name in r.metrics for r in run.results))]
    for name in names:
        values = [result.metrics[name] for result in run.results]
        best = max(values, default=0.0)
        cells = [f"[bold]{v:.4f}[/bold]" if v == best and len(values) > 1 else f"{v:.4f}" for v in values]
        table.add_row(name, *cells)
    table.add_row("seconds", *(f"{result.seconds:.1f}" for result in run.results), end_section=True)
    console.print(table)
    if run.unanswerable and run.results:
        render_unanswered(console, run)


def render_unanswered(console: Console, run: EvalRun) -> None:
    table = Table(
        title=f"{run.unanswerable} questions with no answer in the corpus (not scored): what came first",
        title_justify="left",
    )
    table.add_column("question", overflow="fold", ratio=2)
    table.add_column("mode")
    table.add_column("rank 1", overflow="fold", ratio=2)
    table.add_column("score", justify="right")
    for index, item in enumerate(run.results[0].unanswered):
        for position, result in enumerate(run.results):
            top = result.unanswered[index]
            last = position == len(run.results) - 1
            table.add_row(
                item.question if position == 0 else "",
                result.mode,
                top.top_uri or "—",
                f"{top.top_score:.4g}" if top.top_score is not None else "",
                end_section=last,
            )
    console.print(table)


def write_json(path: Path, run: EvalRun, *, detail: bool = True, **extra: Any) -> None:
    """The run as JSON; ``detail`` adds per-query metrics (left out of baselines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**extra, **run.to_json(detail=detail)}, indent=2) + "\n", encoding="utf-8")


def write_run_files(directory: Path, run: EvalRun, doc_id: Callable[[str], str]) -> list[Path]:
    """One TREC run file per mode, ``<mode>.run`` (``hybrid+rerank`` -> ``hybrid-rerank``)."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for result in run.results:
        tag = f"lore-{result.mode.replace('+', '-')}"
        path = directory / f"{result.mode.replace('+', '-')}.run"
        path.write_text("\n".join(trec_run_lines(result.rankings, tag, doc_id)) + "\n", encoding="utf-8")
        written.append(path)
    return written


@dataclass(frozen=True, slots=True)
class Regression:
    mode: str
    metric: str
    baseline: float
    current: float

    def __str__(self) -> str:
        return f"{self.mode} {self.metric}: {self.current:.4f} < baseline {self.baseline:.4f}"


@dataclass(frozen=True, slots=True)
class Baseline:
    tolerance: float
    embedder: str | None
    #: mode -> metric -> value
    modes: dict[str, dict[str, float]]

    @classmethod
    def read(cls, path: Path) -> Baseline:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise DatasetError(f"cannot read baseline {path}: {err}") from err
        except json.JSONDecodeError as err:
            raise DatasetError(f"baseline {path} is not valid JSON: {err.msg}") from err
        try:
            modes = {
                mode: {
                    name: float(value)
                    for name, value in entry["metrics"].items()
                    if name in METRICS or name in SECTION_METRICS
                }
                for mode, entry in data["modes"].items()
            }
            tolerance = float(data.get("tolerance", DEFAULT_TOLERANCE))
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise DatasetError(f"baseline {path} lacks 'modes' -> <mode> -> 'metrics'") from err
        return cls(tolerance=tolerance, embedder=data.get("embedder"), modes=modes)

    def check(self, run: EvalRun, tolerance: float | None = None) -> list[Regression]:
        """Metrics that fell by more than the tolerance, for every mode both hold."""
        allowed = self.tolerance if tolerance is None else tolerance
        if self.embedder and run.embedder and self.embedder != run.embedder:
            raise ConfigError(
                f"the baseline was measured with embedder {self.embedder!r} but this run uses "
                f"{run.embedder!r}: the numbers are not comparable"
            )
        shared = [result for result in run.results if result.mode in self.modes]
        if not shared:
            raise ConfigError(f"the baseline holds modes {', '.join(self.modes)}; none was evaluated")
        regressions: list[Regression] = []
        for result in shared:
            for name, expected in self.modes[result.mode].items():
                if name not in result.metrics:
                    continue
                current = result.metrics[name]
                # The epsilon keeps float noise in a re-run from failing at exactly the tolerance.
                if current < expected - allowed - 1e-9:
                    regressions.append(Regression(result.mode, name, expected, current))
        return regressions


def write_baseline(path: Path, run: EvalRun, tolerance: float, command: str) -> None:
    write_json(
        path,
        run,
        detail=False,
        description=(
            "Retrieval-quality baseline defended by CI: a metric more than `tolerance` below "
            "its value here fails the check (see docs/quality.md)."
        ),
        command=command,
        tolerance=tolerance,
    )
