"""Retrieval-quality evaluation: metrics, datasets (BEIR, golden sets), the runner.

See docs/quality.md. ``lore eval`` (``lore.cli.eval_cmd``) is the front end.
"""

from __future__ import annotations

from lore.eval.datasets import BeirPaths, EvalQuery, load_beir_queries, load_golden_set
from lore.eval.metrics import METRICS, RankedDocument, Target, query_metrics, rank_documents
from lore.eval.runner import RERANK_MODE, EvalRun, ModeResult, QueryVectorCache, evaluate

__all__ = [
    "METRICS",
    "RERANK_MODE",
    "BeirPaths",
    "EvalQuery",
    "EvalRun",
    "ModeResult",
    "QueryVectorCache",
    "RankedDocument",
    "Target",
    "evaluate",
    "load_beir_queries",
    "load_golden_set",
    "query_metrics",
    "rank_documents",
]
