"""How much of the real corpora secret redaction alters: the false-alarm check.

Runs the redactor exactly as sync does (whole documents, before chunking) over every
document of ../shared/corpora, chunks the result as sync would, and prints per corpus the
documents and chunks altered, the findings per kind, and every altered line (original
then redacted), so a human can judge each one. None should be a false alarm.

    PYTHONPATH=src .venv/bin/python bench/redaction_false_positives.py [--sample N]
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lore.chunking import Chunker
from lore.models import Document, Visibility
from lore.safety.secrets import SecretRedactor
from lore.sources.filesystem import FilesystemSource

#: ../shared/corpora, or the directory in LORE_BENCH_CORPORA (a worktree elsewhere).
SHARED_CORPORA = Path(
    os.environ.get("LORE_BENCH_CORPORA") or Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
)
MARKER = "[REDACTED:"


@dataclass
class CorpusFindings:
    name: str
    documents: int = 0
    chunks: int = 0
    documents_altered: int = 0
    chunks_altered: int = 0
    characters: int = 0
    #: CPU seconds spent in the redactor (the machine may be shared: not wall time).
    redact_seconds: float = 0.0
    kinds: Counter[str] = field(default_factory=Counter)
    #: (uri, original line, redacted line)
    lines: list[tuple[str, str, str]] = field(default_factory=list)


async def measure(folder: Path, redactor: SecretRedactor, chunker: Chunker) -> CorpusFindings:
    source = FilesystemSource(folder.name, folder, visibility=Visibility.ALL_VIEWERS)
    result = CorpusFindings(folder.name)
    async for item in source.documents():
        if not isinstance(item, Document):
            continue
        result.documents += 1
        started = time.process_time()
        text, found = redactor.redact(item.text)
        result.redact_seconds += time.process_time() - started
        result.characters += len(item.text)
        chunks = chunker.chunk(Document(item.uri, item.title, text, item.revision, item.updated_at,
                                        media_type=item.media_type))  # fmt: skip
        result.chunks += len(chunks)
        if not found:
            continue
        result.documents_altered += 1
        result.kinds.update(found)
        already = item.text.count(MARKER)
        result.chunks_altered += sum(chunk.text.count(MARKER) > already for chunk in chunks)
        before, after = item.text.splitlines(), text.splitlines()
        matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
        for tag, a0, a1, b0, b1 in matcher.get_opcodes():
            if tag != "equal":
                result.lines.append((item.uri, " / ".join(before[a0:a1]), " / ".join(after[b0:b1])))
    return result


def _around_change(before: str, after: str, width: int = 60) -> tuple[str, str]:
    """The two lines cut to where they differ, so a long line's change is visible."""
    before, after = " ".join(before.split()), " ".join(after.split())
    start = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), 0)
    tail = next((i for i, (a, b) in enumerate(zip(before[::-1], after[::-1], strict=False)) if a != b), 0)
    lo = max(0, start - width)
    return before[lo : max(start, len(before) - tail) + 20], after[lo : max(start, len(after) - tail) + 20]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=0, help="altered lines to print per corpus (0: all)")
    args = parser.parse_args()
    if not SHARED_CORPORA.is_dir():
        print(f"skipped: {SHARED_CORPORA} is absent", file=sys.stderr)
        return 0
    redactor, chunker = SecretRedactor(), Chunker()
    results = [asyncio.run(measure(folder, redactor, chunker)) for folder in sorted(SHARED_CORPORA.iterdir())
               if folder.is_dir()]  # fmt: skip
    print(f"{'corpus':32} {'docs':>6} {'altered':>8} {'chunks':>7} {'altered':>8} {'MB/s cpu':>9}  kinds")
    for r in results:
        kinds = ", ".join(f"{kind} {n}" for kind, n in r.kinds.most_common()) or "-"
        speed = r.characters / 1e6 / r.redact_seconds if r.redact_seconds else 0.0
        counts = f"{r.documents:6} {r.documents_altered:8} {r.chunks:7} {r.chunks_altered:8} {speed:9.2f}"
        print(f"{r.name:32} {counts}  {kinds}")
    for r in results:
        shown = r.lines if args.sample <= 0 else r.lines[: args.sample]
        if shown:
            first = f", first {len(shown)}" if shown != r.lines else ""
            print(f"\n## {r.name}: {len(r.lines)} altered line(s){first}")
        for uri, before, after in shown:
            was, now = _around_change(before, after)
            print(f"- {uri}\n    was: {was}\n    now: {now}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
