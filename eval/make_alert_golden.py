#!/usr/bin/env python3
"""Build alert golden sets over ../shared/corpora at run time.

The shared corpora are other people's text and must not be copied into this repository,
so these sets are generated, never committed. One walk over the alert runbooks
(``runbooks``: each runbook's uri, alert name, section headings and Meaning section)
feeds two sets:

    .venv/bin/python eval/make_alert_golden.py --out build/eval/shared-alerts.jsonl
    .venv/bin/python eval/make_alert_golden.py --sections --out build/eval/alert-sections.jsonl

**Document level** (the default): each query is the runbook's Meaning section (the
alert's summary and description) with the alert's NAME REMOVED, so the search must match
on the description, not an identifier. The runbooks' own words: easy for BM25 by
construction, kept as a coverage check over every alert runbook. The expected answer is
that runbook, plus any runbook for the same alert name in another corpus or operator
folder (the prometheus-operator and OpenShift collections share several alerts, with
near-identical descriptions). Runbooks without a Meaning section are skipped.

**Section level** (``--sections``): the gold is a section (document and heading, scored by
``lore eval``'s section_hit@1 / section_mrr@10), and no question holds the runbooks' own
text. The alert texts are the hand-written alerting-rule annotations of
``eval/golden/alerts-openshift.yaml`` and ``alerts-prometheus-operator.yaml`` (summary and
description in the public rules' conventions, whose ids are the alerts' names), rendered
as Alertmanager renders them (``{{ $labels.namespace }}`` becomes a namespace, ``{{ $value
}}`` a number). Four questions per alert, each id ending in its shape:

- ``#notification``: ``[FIRING:1] <AlertName>`` and the rendered annotations, as a
  notification carries them; gold: the Meaning section;
- ``#text``: the rendered annotations alone, no alert name (the shape "There are 3
  unhealthy distributor(s)": a count and a component); gold: the Meaning section;
- ``#fix``: ``<AlertName> is firing, how do I fix it?``; gold: the Mitigation section;
- ``#why``: ``why is <AlertName> firing?``; gold: the Diagnosis section.

A shape is left out for an alert whose runbook lacks its section.

**Two halves by document** (``--half design`` / ``--half held-out``): levers for section
ranking are designed and tuned on the design half and judged on the held-out half, never
on the whole. The split is by runbook, not by question, so no runbook's text, headings or
siblings-by-name seen while tuning appear in the held-out half: an alert's runbooks (its
twins in both corpora) go to one half by the SHA-256 of the alert's name in lower case
(even first byte: design), fixed before any figure was looked at, stable across runs and
machines, and independent of the order of the files.

Index the corpora with
eval/shared-alert-runbooks.toml or eval/shared-alerts.toml, whose source names give the
uris used here (``file://<source>/<path>``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO.parent / "shared"
#: The hand-written alert texts the section set renders (ids are the alerts' names).
ALERT_SETS = (
    REPO / "eval/golden/alerts-openshift.yaml",
    REPO / "eval/golden/alerts-prometheus-operator.yaml",
)

#: Source name (as in eval/shared-alerts.toml) -> (corpus folder, folder holding alert runbooks).
ALERT_CORPORA = {
    "openshift": ("openshift-runbooks", "alerts"),
    "prometheus-operator": ("prometheus-operator-runbooks", "content/runbooks"),
}
MIN_QUERY_CHARS = 40

_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)
_H1 = re.compile(r"^#\s+(\S+)", re.MULTILINE)
_H2 = re.compile(r"^##\s+(.+?)\s*$", re.MULTILINE)
_MEANING = re.compile(r"^##\s+Meaning\s*$(.*?)(?=^##\s|\Z)", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_HTML = re.compile(r"<[^>]+>")
_URL = re.compile(r"https?://\S+")


class Runbook(NamedTuple):
    uri: str
    name: str
    #: The runbook's second-level headings (Meaning, Impact, Diagnosis, Mitigation, ...).
    sections: frozenset[str]
    #: The Meaning section's text; None when the runbook has none.
    meaning: str | None


def alert_name(path: Path, text: str) -> str:
    heading = _H1.search(text)
    return heading.group(1) if heading else path.stem


def runbooks(shared: Path) -> Iterator[Runbook]:
    """Every alert runbook of the shared corpora, in a stable order."""
    for source, (folder, alerts) in ALERT_CORPORA.items():
        root = shared / "corpora" / folder
        if not root.is_dir():
            raise SystemExit(f"corpus not found: {root} (is ../shared present?)")
        for path in sorted((root / alerts).rglob("*.md")):
            if path.name.startswith("_") or path.name.lower() == "readme.md":
                continue
            text = _FRONT_MATTER.sub("", path.read_text(encoding="utf-8"), count=1)
            found = _MEANING.search(text)
            yield Runbook(
                uri=f"file://{source}/{path.relative_to(root).as_posix()}",
                name=alert_name(path, text),
                sections=frozenset(heading.strip() for heading in _H2.findall(text)),
                meaning=found.group(1) if found else None,
            )


def plain(section: str, name: str | None = None) -> str:
    """Markdown as plain text, without links' targets, HTML, URLs (and ``name`` anywhere)."""
    text = _LINK.sub(r"\1", section)
    text = _URL.sub(" ", _HTML.sub(" ", text))
    if name:
        text = re.sub(rf"`?{re.escape(name)}`?", " ", text, flags=re.IGNORECASE)
    return " ".join(text.replace("`", "").replace("**", "").split())


#: What a label holds when Alertmanager renders a notification (``{{ $labels.x }}``).
LABEL_VALUES = {
    "namespace": "openshift-monitoring",
    "pod": "prometheus-k8s-1",
    "node": "worker-2.prod.example.internal",
    "exported_node": "worker-2.prod.example.internal",
    "instance": "10.128.4.17:9100",
    "job": "node-exporter",
    "name": "ocs-storagecluster",
    "device": "sdb",
    "cluster": "prod-eu-1",
    "container": "prometheus",
    "controller": "replicaset",
    "reason": "CrashLoopBackOff",
    "service": "alertmanager-main",
    "deployment": "cluster-monitoring-operator",
    "daemonset": "node-exporter",
    "job_name": "cronjob-backup-28372140",
    "phase": "Pending",
    "url": "https://hooks.example.internal/alert",
    "remote_name": "thanos-receive",
    "outputname": "default",
    "resource": "pods",
    "vmi": "vm-rhel9-1",
}
_TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


def rendered(text: str) -> str:
    """An alerting rule's annotation as a notification shows it: labels filled in, the
    value a number (a percentage where the rule humanises it so)."""

    def value(match: re.Match[str]) -> str:
        inside = match.group(1)
        label = re.search(r"\$labels\.(\w+)", inside)
        if label:
            return LABEL_VALUES.get(label.group(1), f"{label.group(1)}-1")
        if "humanizePercentage" in inside:
            return "87.5%"
        if "humanize" in inside:
            return "1.2k"
        return "3"

    return " ".join(_TEMPLATE.sub(value, text).split())


def document_set(books: list[Runbook]) -> list[dict[str, object]]:
    """The document-level set: one Meaning-derived query per runbook (module docstring)."""
    kept = [(book, plain(book.meaning, book.name)) for book in books if book.meaning is not None]
    kept = [(book, query) for book, query in kept if len(query) >= MIN_QUERY_CHARS]
    twins = _twins([book for book, _ in kept])
    return [
        {
            "id": book.uri.removeprefix("file://"),
            "question": query,
            "expected": [book.uri, *(other.uri for other in twins[book.name.lower()] if other is not book)],
        }
        for book, query in kept
    ]


#: The section set's shapes: id suffix -> (question from name and rendered text, gold heading).
SHAPES: dict[str, tuple[Callable[[str, str], str], str]] = {
    "notification": (lambda name, text: f"[FIRING:1] {name}\n{text}", "Meaning"),
    "text": (lambda name, text: text, "Meaning"),
    "fix": (lambda name, text: f"{name} is firing, how do I fix it?", "Mitigation"),
    "why": (lambda name, text: f"why is {name} firing?", "Diagnosis"),
}


def section_set(books: list[Runbook], alert_sets: tuple[Path, ...] = ALERT_SETS) -> list[dict[str, object]]:
    """The section-level set: four shapes per hand-written alert (module docstring)."""
    twins = _twins(books)
    entries: list[dict[str, object]] = []
    for path in alert_sets:
        for question in yaml.safe_load(path.read_text(encoding="utf-8"))["questions"]:
            name, text = str(question["id"]), rendered(str(question["question"]))
            for shape, (ask, heading) in SHAPES.items():
                gold = [
                    {"uri": book.uri, "section": heading}
                    for book in twins[name.lower()]
                    if heading in book.sections
                ]
                if gold:
                    entries.append({"id": f"{name}#{shape}", "question": ask(name, text), "expected": gold})
    return entries


#: The two halves of the section set (module docstring, "Two halves by document").
HALVES = ("design", "held-out")


def half_of(alert: str) -> str:
    """The half an alert's runbooks belong to: the SHA-256 of its name in lower case,
    even first byte design, odd held-out."""
    return HALVES[hashlib.sha256(alert.lower().encode("utf-8")).digest()[0] % 2]


def in_half(entries: list[dict[str, object]], half: str) -> list[dict[str, object]]:
    """The entries of ``section_set`` whose alert (the id before ``#``) lies in ``half``."""
    return [entry for entry in entries if half_of(str(entry["id"]).split("#", 1)[0]) == half]


def _twins(books: list[Runbook]) -> dict[str, list[Runbook]]:
    """Runbooks by alert name (lower case): a name may have one in each corpus."""
    by_name: dict[str, list[Runbook]] = defaultdict(list)
    for book in books:
        by_name[book.name.lower()].append(book)
    return by_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the shared data folder")
    parser.add_argument("--out", type=Path, required=True, help="golden set to write (.jsonl)")
    parser.add_argument("--sections", action="store_true", help="the section-level set (see above)")
    parser.add_argument("--half", choices=HALVES, help="with --sections: one half, split by document")
    args = parser.parse_args()
    books = list(runbooks(args.shared))
    entries = section_set(books) if args.sections else document_set(books)
    if args.half:
        if not args.sections:
            parser.error("--half splits the section set: give --sections too")
        entries = in_half(entries, args.half)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(entry) + "\n" for entry in entries), encoding="utf-8")
    print(f"{len(entries)} alert questions written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
