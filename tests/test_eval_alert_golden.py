"""The alert-to-runbook golden set generated from ../shared/corpora (never copied in)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

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
    assert script.query_text(section, "etcdNoLeader") == "The alert fires when etcd has no leader ( )."


def test_alert_golden_set(shared_root: Path, repo_root: Path, tmp_path: Path) -> None:
    script = load_script(repo_root)
    entries = script.build(shared_root)
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
