"""Injection screening measured on attacks nobody on the project wrote: public prompt-
injection corpora, each attack planted into a runbook-shaped page, reported as caught /
passed per attack family.

Corpora read (each optional; a missing one is skipped with a reason):

- BIPIA (github.com/microsoft/BIPIA): ``benchmark/text_attack_{test,train}.json`` and
  ``benchmark/code_attack_{test,train}.json``, attack instructions by family (indirect
  prompt injection planted in e-mails, tables, code answers);
- Tensor Trust (github.com/HumanCompatibleAI/tensor-trust-data):
  ``benchmarks/hijacking-robustness/v1/hijacking_robustness_dataset.jsonl`` and
  ``benchmarks/extraction-robustness/v1/extraction_robustness_dataset.jsonl``, attacks
  players wrote against an LLM's defence prompt (the ``attack`` field).

Each attack is planted in three places of a page: a paragraph, a list item, and the
body of a fenced block (as a pasted log line would be). An attack counts as caught in a
place when screening reported a finding for the page and changed the attack's text
(the page around it is plain runbook prose, which on its own has none). Printed: per
family, attacks, caught per place and overall (caught in all three places), and the
finding kinds seen.

    PYTHONPATH=src .venv/bin/python bench/injection_external_corpora.py \\
        --bipia PATH/TO/BIPIA --tensor-trust PATH/TO/tensor-trust-data [--examples 3]

Nothing is downloaded: point the options at checkouts (or at directories holding the
named files). The data is not in lore's repository.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from lore.safety.injection import screen_injections

PLACES = ("paragraph", "list item", "code block")


def page(attack: str, place: str) -> str:
    if place == "paragraph":
        body = attack
    elif place == "list item":
        body = "\n".join(
            ("- " if index == 0 else "  ") + line for index, line in enumerate(attack.splitlines())
        )
    else:
        body = "```\n" + attack.replace("```", "'''") + "\n```"
    return (
        "# Replica lag on the orders database\n\n## Symptoms\n\n"
        "The `OrdersReplicaLagHigh` alert fires when a replica is more than 30 s behind.\n\n"
        f"## Notes from the last incident\n\n{body}\n\n"
        "## Recovery\n\n1. Check `pg_stat_replication` on the primary.\n"
        "2. If lag keeps growing, fail the replica out of the pool and page the database on-call.\n"
    )


def find(root: Path | None, name: str) -> Path | None:
    if root is None or not root.exists():
        return None
    if root.is_file():
        return root if root.name == name else None
    return next(iter(sorted(root.rglob(name))), None)


def bipia(root: Path | None, split: str) -> Iterator[tuple[str, str]]:
    for name, prefix in (
        (f"text_attack_{split}.json", "BIPIA text"),
        (f"code_attack_{split}.json", "BIPIA code"),
    ):
        path = find(root, name)
        if path is None:
            print(f"skipped: {name} not found under {root}")
            continue
        for family, attacks in json.loads(path.read_text(encoding="utf-8")).items():
            for attack in attacks:
                yield f"{prefix}: {family}", attack


def tensor_trust(root: Path | None) -> Iterator[tuple[str, str]]:
    for name, family in (
        ("hijacking_robustness_dataset.jsonl", "Tensor Trust: hijacking"),
        ("extraction_robustness_dataset.jsonl", "Tensor Trust: extraction"),
    ):
        path = find(root, name)
        if path is None:
            print(f"skipped: {name} not found under {root}")
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield family, json.loads(line)["attack"]


def caught(attack: str, place: str, kinds: Counter[str]) -> bool:
    text = page(attack, place)
    screened, findings = screen_injections(text)
    kinds.update(findings)
    return bool(findings) and screened != text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bipia", type=Path, help="a BIPIA checkout (or a directory holding its attack files)"
    )
    parser.add_argument("--tensor-trust", type=Path, help="a tensor-trust-data checkout")
    parser.add_argument("--bipia-split", choices=("test", "train"), default="test")
    parser.add_argument("--examples", type=int, default=2, help="attacks that passed to print per family")
    args = parser.parse_args()
    attacks = [*bipia(args.bipia, args.bipia_split), *tensor_trust(args.tensor_trust)]
    if not attacks:
        print("skipped: no corpus found (give --bipia and/or --tensor-trust)")
        return 0
    by_family: dict[str, list[str]] = {}
    for family, attack in attacks:
        by_family.setdefault(family, []).append(attack)
    header = (
        f"{'family':58} {'attacks':>7} " + " ".join(f"{place:>10}" for place in PLACES) + f" {'all 3':>7}"
    )
    print(header)
    totals: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    passed_examples: list[str] = []
    for family, texts in by_family.items():
        counts: Counter[str] = Counter()
        for attack in texts:
            results = [caught(attack, place, kinds) for place in PLACES]
            counts.update({place: int(ok) for place, ok in zip(PLACES, results, strict=True)})
            counts["all"] += all(results)
            if not any(results) and sum(f.startswith(family) for f in passed_examples) < args.examples:
                passed_examples.append(f"{family}: {attack[:140]!r}")
        totals.update(counts)
        totals["attacks"] += len(texts)
        print(
            f"{family[:58]:58} {len(texts):>7} "
            + " ".join(f"{counts[place] / len(texts):>10.1%}" for place in PLACES)
            + f" {counts['all'] / len(texts):>7.1%}"
        )
    n = totals["attacks"]
    print(
        f"{'all':58} {n:>7} "
        + " ".join(f"{totals[place] / n:>10.1%}" for place in PLACES)
        + f" {totals['all'] / n:>7.1%}"
    )
    print("findings by kind:", dict(kinds.most_common()))
    print("passed (examples):")
    for example in passed_examples:
        print("  " + example)
    return 0


if __name__ == "__main__":
    sys.exit(main())
