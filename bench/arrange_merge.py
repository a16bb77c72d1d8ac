"""CPU of merging a search's runs of chunks (``lore.arrange.merged``), this checkout against
another checkout's ``lore/arrange.py``.

    .venv/bin/python bench/arrange_merge.py --peer ../base/src [--rounds 40] [--calls 300]

Eighteen candidates (three documents, runs of two and three chunks of about 560
characters with the chunker's overlap, and chunks alone), merged with the output cap per
passage (as a search does) and without it (as ``lore eval`` does). Each round times
``--calls`` calls of the peer's then this checkout's, in thread CPU time so that the
machine's load counts for neither; the figure is the fastest round of each, per call, and
this checkout's against the peer's. Both must show the same texts.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
import timeit
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import lore.arrange
from lore.models import Passage, make_chunk_id

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = [f"word{n:03d}" for n in range(2000)]


def candidates() -> list[Passage]:
    def chunk(uri: str, number: int, score: float) -> Passage:
        text = " ".join(WORDS[number * 60 : number * 60 + 70])  # ten words shared with the next
        return Passage(
            text=text, uri=uri, title=uri, section=f"S{number // 4}", revision="r", updated_at=WHEN,
            score=score, labels={}, chunk_id=make_chunk_id(uri, number, text),
        )

    return [
        chunk(f"file://d{document}.md", number, 1 - (document * 7 + number) / 100)
        for document in range(3)
        for number in (0, 1, 2, 5, 6, 9)
    ]


def peer_arrange(src: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("peer_arrange", src / "lore" / "arrange.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"--peer {src}: no lore/arrange.py there")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fastest(call: Callable[[], object], calls: int) -> float:
    return timeit.Timer(call, timer=time.thread_time).timeit(number=calls) / calls


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", type=Path, required=True, help="another checkout's src/ folder")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    peer, ranked = peer_arrange(args.peer.resolve()), candidates()
    for max_chars in (2400, None):
        ours = [p.text for p in lore.arrange.merged(ranked, max_chars=max_chars)]
        if ours != [p.text for p in peer.merged(ranked, max_chars=max_chars)]:
            raise SystemExit(f"max_chars={max_chars}: the two checkouts show different texts")
        before, after = [], []
        for _ in range(args.rounds):  # alternating, so drift falls on both alike
            before.append(fastest(lambda m=max_chars: peer.merged(ranked, max_chars=m), args.calls))
            after.append(fastest(lambda m=max_chars: lore.arrange.merged(ranked, max_chars=m), args.calls))
        old, new = min(before), min(after)
        print(
            f"max_chars={max_chars}: peer {old * 1e6:.1f} us, this checkout {new * 1e6:.1f} us "
            f"per call ({new / old:.2f}x)"
        )


if __name__ == "__main__":
    main()
