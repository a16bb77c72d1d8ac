"""The alert golden sets generated from ../shared/corpora (never copied in): the document
set from the runbooks' Meaning (name removed), the section set from the hand-written alert
texts of eval/golden/alerts-*.yaml, rendered as a notification shows them."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import yaml

from lore.eval.datasets import load_golden_set


def load_script(repo_root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_alert_golden", repo_root / "eval" / "make_alert_golden.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_query_text_removes_the_alert_name(repo_root: Path) -> None:
    script = load_script(repo_root)
    section = (
        "\nThe alert `etcdNoLeader` fires when [etcd](https://etcd.io) has <b>no</b> leader (etcdnoleader).\n"
    )
    assert script.plain(section, "etcdNoLeader") == "The alert fires when etcd has no leader ( )."


def test_alert_golden_set(shared_root: Path, repo_root: Path, tmp_path: Path) -> None:
    script = load_script(repo_root)
    entries = script.document_set(list(script.runbooks(shared_root)))
    assert len(entries) > 300
    out = tmp_path / "alerts.jsonl"
    out.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    queries = load_golden_set(out)
    sources = {name: shared_root / "corpora" / folder for name, (folder, _) in script.ALERT_CORPORA.items()}
    for entry, query in zip(entries, queries, strict=True):
        own = query.targets[0].uri
        source, relative = own.removeprefix("file://").split("/", 1)
        path = sources[source] / relative
        assert path.is_file()
        name = script.alert_name(path, path.read_text())
        assert not re.search(re.escape(name), query.text, re.IGNORECASE), entry["id"]
        assert len(query.text) >= script.MIN_QUERY_CHARS


def test_rendered_fills_labels_and_values_as_a_notification_shows_them(repo_root: Path) -> None:
    script = load_script(repo_root)
    text = (
        "{{ $value | humanizePercentage }} of {{ $labels.job }} targets in {{$labels.namespace}} "
        "are down ({{ $value }})."
    )
    assert script.rendered(text) == "87.5% of node-exporter targets in openshift-monitoring are down (3)."


def test_section_set_asks_in_the_alert_rules_words_not_the_runbooks(
    shared_root: Path, repo_root: Path, tmp_path: Path
) -> None:
    script = load_script(repo_root)
    books = list(script.runbooks(shared_root))
    entries = script.section_set(books)
    assert len(entries) > 300
    shapes = {entry["id"].split("#")[1] for entry in entries}
    assert shapes == {"notification", "text", "fix", "why"}
    meanings = {book.uri: script.plain(book.meaning) for book in books if book.meaning}
    written = {
        str(question["id"]): script.rendered(str(question["question"]))
        for path in script.ALERT_SETS
        for question in yaml.safe_load(path.read_text(encoding="utf-8"))["questions"]
    }
    for entry in entries:
        name, shape = entry["id"].split("#")
        assert "{{" not in entry["question"]
        if shape in {"notification", "text"}:
            assert entry["question"].endswith(written[name])  # the hand-written rule's text
            for gold in entry["expected"]:
                assert entry["question"] not in meanings[gold["uri"]]  # not the runbook's own words
        else:
            assert name in entry["question"]
        assert all(gold["section"] == script.SHAPES[shape][1] for gold in entry["expected"])
    out = tmp_path / "sections.jsonl"
    out.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    assert all(query.targets and query.targets[0].section for query in load_golden_set(out))


def test_the_two_halves_split_by_alert_so_no_runbook_is_in_both(repo_root: Path) -> None:
    """Section levers are tuned on the design half and judged on the held-out one: an
    alert's four questions (and its runbooks in both corpora) fall in one half, by a hash
    of its name fixed in the script, whatever the order of the entries."""
    script = load_script(repo_root)
    entries = [
        {"id": f"{name}#{shape}", "question": "q", "expected": []}
        for name in ("KubeNodeNotReady", "etcdNoLeader", "TargetDown", "CephClusterNearFull", "Watchdog")
        for shape in script.SHAPES
    ]
    design, held_out = script.in_half(entries, "design"), script.in_half(entries, "held-out")
    assert len(design) + len(held_out) == len(entries)
    assert design
    assert held_out
    assert {e["id"].split("#")[0] for e in design}.isdisjoint(e["id"].split("#")[0] for e in held_out)
    assert script.in_half(list(reversed(entries)), "design") == list(reversed(design))
    assert script.half_of("KubeNodeNotReady") == script.half_of(
        "kubenodenotready"
    )  # names as the twins match


def test_the_halves_of_the_section_set_share_no_runbook(shared_root: Path, repo_root: Path) -> None:
    script = load_script(repo_root)
    entries = script.section_set(list(script.runbooks(shared_root)))
    uris = {
        half: {gold["uri"] for entry in script.in_half(entries, half) for gold in entry["expected"]}
        for half in script.HALVES
    }
    assert uris["design"]
    assert uris["held-out"]
    assert uris["design"].isdisjoint(uris["held-out"])
