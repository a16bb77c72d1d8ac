"""Which document won where a golden-set query missed: per mode, each query whose
expected document is not in the first ``--k`` documents, with the documents that were.

    .venv/bin/python eval/tuning/misses.py --config eval/shared-alerts.toml \
        --golden eval/golden/alerts-gitlab.yaml [--mode hybrid,bm25,vector] [--k 5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lore.config import load_settings
from lore.eval.datasets import load_golden_set
from lore.eval.metrics import RankedDocument
from lore.resolve import resolve_retriever


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--golden", type=Path, required=True)
    parser.add_argument("--mode", default="hybrid")
    parser.add_argument("--k", type=int, default=5)
    args = parser.parse_args()
    retriever = resolve_retriever(load_settings(args.config))
    for mode in args.mode.split(","):
        for query in load_golden_set(args.golden):
            if not query.answerable:
                continue
            uris: list[str] = []
            # 200 chunks, as `lore eval` asks for: score fusion normalises over the depth searched.
            # 200 chunks, as `lore eval` asks for: score fusion normalises over that depth.
            for passage in retriever.search(query.text, top_k=200, mode=mode):  # type: ignore[attr-defined]
                if passage.uri not in uris:
                    uris.append(passage.uri)
            wanted = [t.uri for t in query.targets]
            hits = [
                i + 1
                for i, uri in enumerate(uris)
                if any(t.matches(RankedDocument(uri, 0.0, [])) for t in query.targets)
            ]
            if not hits or hits[0] > args.k:
                rank = hits[0] if hits else None
                print(f"[{mode}] {query.qid}: expected {wanted[0]} at {rank}\n    {query.text[:140]}")
                for uri in uris[: args.k]:
                    print(f"      {uri}")


if __name__ == "__main__":
    main()
