"""How often injection screening fires on real runbooks (false positives, by construction:
the corpora in ../shared/corpora are published runbooks with no planted attacks).

Every document of every corpus is read by the filesystem source and chunked as sync
would; each chunk's text, title and section go through ``screen_injections``. Printed:
chunks screened, chunks with any finding, chunks with an instruction-like finding (every
kind but the link/image/HTML-comment policy kinds, which fire on any outside URL or
comment by design), findings per kind, and a sample of the flagged lines (instruction-like
first) so a reader can judge them.

    PYTHONPATH=src .venv/bin/python bench/injection_false_positives.py [--sample 20] [--corpora DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import sys
from collections import Counter
from pathlib import Path

from lore.chunking import Chunker
from lore.models import Document, Visibility
from lore.safety.injection import screen_injections
from lore.sources.filesystem import FilesystemSource

SHARED_CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
#: The example corpus shipped with lore, measured beside the shared ones.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: Kinds that fire on every outside URL or HTML comment, by policy, not on wording.
POLICY_KINDS = frozenset({"external_link", "external_image", "html_comment"})


async def documents(root: Path) -> list[Document]:
    source = FilesystemSource(root.name, root, visibility=Visibility.ALL_VIEWERS, include=["**/*.md"])
    return [item async for item in source.documents() if isinstance(item, Document)]


def changed_lines(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] == "-" and not line.startswith("---")]


def row(name: str, documents: int | None, counts: Counter[str]) -> str:
    chunks = counts["chunks"] or 1
    return (
        f"{name:32} {'' if documents is None else documents:>9} {counts['chunks']:>7} "
        f"{counts['any']:>6} {counts['any'] / chunks:>7.2%} "
        f"{counts['wording']:>6} {counts['wording'] / chunks:>7.2%}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=15, help="flagged lines to print")
    parser.add_argument("--corpora", type=Path, default=SHARED_CORPORA, help="directory of corpora")
    args = parser.parse_args()
    if not args.corpora.is_dir():
        print(f"skipped: {args.corpora} is absent")
        return 0

    chunker = Chunker()
    print(f"{'corpus':32} {'documents':>9} {'chunks':>7} {'any':>6} {'rate':>7} {'instr.':>6} {'rate':>7}")
    kinds: Counter[str] = Counter()
    samples: list[tuple[bool, str]] = []
    totals = Counter[str]()
    roots = sorted(path for path in args.corpora.iterdir() if path.is_dir())
    for root in [*roots, *([EXAMPLES] if EXAMPLES.is_dir() else [])]:
        docs = asyncio.run(documents(root))
        counts = Counter[str]()
        for document in docs:
            for chunk in chunker.chunk(document):
                counts["chunks"] += 1
                found: Counter[str] = Counter()
                for field in (chunk.text, document.title, chunk.section):
                    screened, findings = screen_injections(field)
                    found.update(findings)
                    wording = bool(set(findings) - POLICY_KINDS)
                    for line in changed_lines(field, screened) if findings else []:
                        shown = f"{document.uri}: {dict(findings)} {line[1:].strip()[:160]}"
                        samples.append((wording, shown))
                kinds.update(found)
                counts["any"] += bool(found)
                counts["wording"] += bool(set(found) - POLICY_KINDS)
        totals.update(counts)
        print(row(root.name, len(docs), counts))
    print(row("all", None, totals))
    print("findings by kind:", dict(kinds.most_common()) or "none")
    samples.sort(key=lambda sample: not sample[0])
    for _wording, line in samples[: args.sample]:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
