#!/usr/bin/env python3
"""Build the alert-to-runbook golden set from ../shared/corpora at run time.

The shared corpora are other people's text and must not be copied into this repository,
so the golden set is generated, never committed:

    .venv/bin/python eval/make_alert_golden.py --out build/eval/shared-alerts.jsonl

Each query is what an alert tells the on-call engineer (the runbook's "Meaning" section:
the alert's summary and description) with the alert's NAME REMOVED, so the search must
match on the description, not on an identifier. The expected answer is that runbook,
plus any runbook for the same alert name in another corpus or operator folder (the
prometheus-operator and OpenShift collections share several alerts, with near-identical
descriptions). Runbooks without a Meaning section (stubs, "moved to", deprecated) are
skipped. Index the corpora with eval/shared-alerts.toml, whose source names give the
uris used here (``file://<source>/<path>``).

``--sections`` writes a section-level set instead (the gold is a section: document and
heading, scored by ``lore eval``'s section_hit@1 / section_mrr@10), two questions per
runbook that has both sections, both shaped like what reaches the on-call engineer:

- the notification: ``[FIRING:1] <AlertName>`` and the first sentence of its Meaning,
  the name KEPT as a real alert carries it; gold: the Meaning section;
- the follow-up: ``<AlertName> is firing, how do I fix it?``; gold: the Mitigation section,
  a sibling of Meaning with none of its words.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO.parent / "shared"

#: Source name (as in eval/shared-alerts.toml) -> (corpus folder, folder holding alert runbooks).
ALERT_CORPORA = {
    "openshift": ("openshift-runbooks", "alerts"),
    "prometheus-operator": ("prometheus-operator-runbooks", "content/runbooks"),
}
MIN_QUERY_CHARS = 40

_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)
_H1 = re.compile(r"^#\s+(\S+)", re.MULTILINE)
_MEANING = re.compile(r"^##\s+Meaning\s*$(.*?)(?=^##\s|\Z)", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_HTML = re.compile(r"<[^>]+>")
_URL = re.compile(r"https?://\S+")


def alert_name(path: Path, text: str) -> str:
    heading = _H1.search(text)
    return heading.group(1) if heading else path.stem


def meaning(text: str) -> str | None:
    found = _MEANING.search(_FRONT_MATTER.sub("", text, count=1))
    return found.group(1) if found else None


def query_text(section: str, name: str) -> str:
    """The Meaning section as plain text, without the alert's name anywhere in it."""
    text = _LINK.sub(r"\1", section)
    text = _URL.sub(" ", _HTML.sub(" ", text))
    text = re.sub(rf"`?{re.escape(name)}`?", " ", text, flags=re.IGNORECASE)
    text = text.replace("`", "").replace("**", "")
    return " ".join(text.split())


def build(shared: Path) -> list[dict[str, object]]:
    runbooks: list[tuple[str, str, str]] = []  # (uri, alert name, query)
    for source, (folder, alerts) in ALERT_CORPORA.items():
        root = shared / "corpora" / folder
        if not root.is_dir():
            raise SystemExit(f"corpus not found: {root} (is ../shared present?)")
        for path in sorted((root / alerts).rglob("*.md")):
            if path.name.startswith("_") or path.name.lower() == "readme.md":
                continue
            text = path.read_text(encoding="utf-8")
            section = meaning(text)
            if section is None:
                continue
            name = alert_name(path, text)
            query = query_text(section, name)
            if len(query) >= MIN_QUERY_CHARS:
                runbooks.append((f"file://{source}/{path.relative_to(root).as_posix()}", name, query))
    by_name: dict[str, list[str]] = defaultdict(list)
    for uri, name, _ in runbooks:
        by_name[name.lower()].append(uri)
    return [
        {
            "id": uri.removeprefix("file://"),
            "question": query,
            "expected": [uri, *(other for other in by_name[name.lower()] if other != uri)],
        }
        for uri, name, query in runbooks
    ]


_MITIGATION = re.compile(r"^##\s+Mitigation\s*$", re.MULTILINE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def build_sections(shared: Path) -> list[dict[str, object]]:
    runbooks: list[tuple[str, str, str, bool]] = []  # (uri, alert name, first sentence, has Mitigation)
    for source, (folder, alerts) in ALERT_CORPORA.items():
        root = shared / "corpora" / folder
        if not root.is_dir():
            raise SystemExit(f"corpus not found: {root} (is ../shared present?)")
        for path in sorted((root / alerts).rglob("*.md")):
            if path.name.startswith("_") or path.name.lower() == "readme.md":
                continue
            text = path.read_text(encoding="utf-8")
            section = meaning(text)
            if section is None:
                continue
            name = alert_name(path, text)
            plain = " ".join(_LINK.sub(r"\1", _URL.sub(" ", _HTML.sub(" ", section))).replace("`", "").split())
            first = _SENTENCE.split(plain, maxsplit=1)[0]
            if len(first) >= MIN_QUERY_CHARS:
                uri = f"file://{source}/{path.relative_to(root).as_posix()}"
                runbooks.append((uri, name, first, bool(_MITIGATION.search(text))))
    by_name: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for uri, name, _, mitigation in runbooks:
        by_name[name.lower()].append((uri, mitigation))
    entries: list[dict[str, object]] = []
    for uri, name, first, mitigation in runbooks:
        twins = by_name[name.lower()]
        entries.append(
            {
                "id": f"{uri.removeprefix('file://')}#meaning",
                "question": f"[FIRING:1] {name}\n{first}",
                "expected": [{"uri": other, "section": "Meaning"} for other, _ in twins],
            }
        )
        if mitigation:
            entries.append(
                {
                    "id": f"{uri.removeprefix('file://')}#mitigation",
                    "question": f"{name} is firing, how do I fix it?",
                    "expected": [{"uri": other, "section": "Mitigation"} for other, has in twins if has],
                }
            )
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the shared data folder")
    parser.add_argument("--out", type=Path, required=True, help="golden set to write (.jsonl)")
    parser.add_argument("--sections", action="store_true", help="the section-level set (see above)")
    args = parser.parse_args()
    entries = build_sections(args.shared) if args.sections else build(args.shared)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(entry) + "\n" for entry in entries), encoding="utf-8")
    print(f"{len(entries)} alert questions written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
