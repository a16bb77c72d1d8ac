"""Fit lore.confidence's models on the calibration halves of golden sets.

Step 1, per corpus: run the calibration questions (answerable and no-answer) through the
configured index as the agent tool does, and keep each shown passage's evidence and
whether it is relevant::

    LORE_VAULT__ENABLED=false LORE_DB_PATH=$PWD/build/eval/examples.db \
        .venv/bin/python eval/calibrate_confidence.py collect --config examples/lore.toml \
        --out build/eval/calib-examples.jsonl eval/golden/examples.yaml eval/golden/no-answer-examples.yaml

Step 2: fit one logistic model per feature set over all collected passages and print the
constants for ``lore/confidence.py`` (``MODELS``), with each level's answer counts::

    .venv/bin/python eval/calibrate_confidence.py fit build/eval/calib-*.jsonl

The fit is Newton's method on a 2-4 parameter logistic regression with a small ridge
penalty: a dozen lines of numpy, where scikit-learn would be a dependency for one call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lore.confidence import CUTOFFS, MODELS, Logistic, level
from lore.config import load_settings
from lore.eval.datasets import EvalQuery, load_golden_set
from lore.eval.verdict import judge, passage_rows
from lore.resolve import resolve_retriever

FEATURE_SETS = [("coverage", "cosine", "agree"), ("coverage", "cosine"), ("coverage",), ("cosine",)]
RIDGE = 0.1


def collect(config: Path | None, files: Sequence[Path], out: Path, split: str, top_k: int) -> None:
    settings = load_settings(config_file=config) if config else load_settings()
    retriever = resolve_retriever(settings, None)
    if retriever is None:
        raise SystemExit("no retriever configured")
    queries: list[EvalQuery] = [q for path in files for q in load_golden_set(path) if q.split == split]
    judged = asyncio.run(judge(retriever, queries, top_k=top_k))
    rows = passage_rows(judged, queries)
    for item in judged:
        for row in rows:
            if row["qid"] == item.qid:
                row["answerable"] = item.answerable
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(f"{len(queries)} questions, {len(rows)} passages -> {out}")


def _features(row: dict[str, object], names: Sequence[str]) -> list[float] | None:
    values: list[float] = []
    for name in names:
        if name == "agree":
            ranks = row["ranks"]
            assert isinstance(ranks, dict)
            if not {"bm25", "vector"} <= ranks.keys():
                values.append(0.0)
                continue
            values.append(float(max(ranks["bm25"], ranks["vector"]) <= 10))
            continue
        value = row[name]
        if value is None:
            return None
        assert isinstance(value, float | int)
        values.append(float(value))
    return values


def fit_logistic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Weights (bias first) maximising the ridge-penalised log likelihood."""
    design = np.hstack([np.ones((len(x), 1)), x])
    weights = np.zeros(design.shape[1])
    penalty = RIDGE * np.eye(design.shape[1])
    penalty[0, 0] = 0.0  # the bias is not shrunk
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-design @ weights))
        gradient = design.T @ (p - y) + penalty @ weights
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hessian, gradient)
        weights -= step
        if np.abs(step).max() < 1e-8:
            break
    return weights


def fit(paths: Sequence[Path]) -> None:
    rows = [json.loads(line) for path in paths for line in path.read_text(encoding="utf-8").splitlines()]
    print(f"{len(rows)} passages, {sum(r['relevant'] for r in rows)} relevant")
    models: dict[frozenset[str], Logistic] = {}
    for names in FEATURE_SETS:
        usable = [(f, r["relevant"]) for r in rows if (f := _features(r, names)) is not None]
        x = np.array([f for f, _ in usable])
        y = np.array([float(relevant) for _, relevant in usable])
        weights = fit_logistic(x, y)
        model = Logistic(bias=round(float(weights[0]), 3), weights={
            name: round(float(w), 3) for name, w in zip(names, weights[1:], strict=True)
        })
        models[frozenset(names)] = model
        print(f"    frozenset({set(names)!r}): {model!r},")
    _answers(rows, models[frozenset(FEATURE_SETS[0])], FEATURE_SETS[0])


def _answers(rows: list[dict[str, object]], model: Logistic, names: Sequence[str]) -> None:
    """Each question's best probability, by answerability: where the cut-offs fall."""
    best: dict[str, tuple[bool, float]] = {}
    for row in rows:
        values = _features(row, names)
        if values is None:
            continue
        p = model.probability(dict(zip(names, values, strict=True)))
        qid = str(row["qid"])
        answerable = bool(row.get("answerable"))
        best[qid] = (answerable, max(p, best.get(qid, (answerable, 0.0))[1]))
    for answerable in (True, False):
        probabilities = sorted(p for a, p in best.values() if a is answerable)
        counts: dict[str, int] = {}
        for p in probabilities:
            counts[level(p).value] = counts.get(level(p).value, 0) + 1
        label = "answerable" if answerable else "no-answer"
        quantiles = np.round(np.quantile(probabilities, [0, 0.1, 0.25, 0.5, 0.75, 0.9, 1]), 3)
        print(f"{label}: {len(probabilities)} questions, levels {counts}, best p quantiles {quantiles}")
    print(f"cut-offs now: {dict((c.value, v) for c, v in CUTOFFS.items())}; models now: {len(MODELS)}")


def _fitted(rows: list[dict[str, object]], names: Sequence[str]) -> Logistic:
    usable = [(f, r["relevant"]) for r in rows if (f := _features(r, names)) is not None]
    weights = fit_logistic(np.array([f for f, _ in usable]), np.array([float(y) for _, y in usable]))
    return Logistic(bias=float(weights[0]), weights=dict(zip(names, map(float, weights[1:]), strict=True)))


Best = dict[str, tuple[bool, bool, float]]


def _best_per_question(rows: list[dict[str, object]], model: Logistic, names: Sequence[str]) -> Best:
    """qid -> (answerable, relevant passage shown, best probability)."""
    best: dict[str, tuple[bool, bool, float]] = {}
    for row in rows:
        values = _features(row, names)
        p = 0.0 if values is None else model.probability(dict(zip(names, values, strict=True)))
        qid = str(row["qid"])
        answerable, hit, top = best.get(qid, (bool(row.get("answerable")), False, 0.0))
        best[qid] = (answerable, hit or bool(row["relevant"]), max(top, p))
    return best


def _low_cutoff(best: Best) -> float:
    """The rule of lore.confidence: half the best probability of the least confident
    answerable calibration question, rounded down to a tenth."""
    least = min(p for answerable, _, p in best.values() if answerable)
    return math.floor(least / 2 * 10) / 10


def crossval(calibration: Sequence[Path], holdout: Sequence[Path], low: float | None = None) -> None:
    """Two folds: fit the model and the ``low`` cut-off (or take ``low`` as given) on one
    half of every set at once, report each set's other half; then swap the halves."""
    names = FEATURE_SETS[0]
    load = {path: [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
            for path in [*calibration, *holdout]}
    for fit_on, report_on in ((calibration, holdout), (holdout, calibration)):
        rows = [row for path in fit_on for row in load[path]]
        model = _fitted(rows, names)
        cut = low if low is not None else _low_cutoff(_best_per_question(rows, model, names))
        terms = " + ".join(f"{w:.2f}·{n}" for n, w in model.weights.items())
        print(f"fit on {', '.join(p.name for p in fit_on)}: p = σ({model.bias:.2f} + {terms}), low {cut:.1f}")
        print("| reported on | answerable / no-answer | none precision | none recall "
              "| answerable called none | hits lost |")
        print("|---|---|---:|---:|---:|---:|")
        for path in report_on:
            best = _best_per_question(load[path], model, names)
            none = {qid for qid, (_, _, p) in best.items() if p < cut}
            answerable = {qid for qid, (a, _, _) in best.items() if a}
            true_none = len(none - answerable)
            precision = true_none / len(none) if none else 1.0
            recall = true_none / (len(best) - len(answerable)) if len(best) > len(answerable) else 0.0
            lost = sum(1 for qid in none & answerable if best[qid][1])
            print(f"| {path.name} | {len(answerable)} / {len(best) - len(answerable)} | {precision:.3f} | "
                  f"{recall:.3f} | {len(none & answerable)} | {lost} |")
        print()


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    collecting = commands.add_parser("collect")
    collecting.add_argument("files", nargs="+", type=Path)
    collecting.add_argument("--config", type=Path)
    collecting.add_argument("--out", type=Path, required=True)
    collecting.add_argument("--split", default="calibration")
    collecting.add_argument("--top-k", type=int, default=8)
    fitting = commands.add_parser("fit")
    fitting.add_argument("files", nargs="+", type=Path)
    crossing = commands.add_parser("crossval")
    crossing.add_argument("--calibration", nargs="+", type=Path, required=True)
    crossing.add_argument("--holdout", nargs="+", type=Path, required=True)
    crossing.add_argument("--low", type=float, help="a fixed low cut-off instead of the rule's")
    args = parser.parse_args(argv)
    if args.command == "crossval":
        crossval(args.calibration, args.holdout, args.low)
    elif args.command == "collect":
        collect(args.config, args.files, args.out, args.split, args.top_k)
    else:
        fit(args.files)


if __name__ == "__main__":
    main(sys.argv[1:])
