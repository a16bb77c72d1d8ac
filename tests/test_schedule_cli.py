"""``lore sync --watch``, ``lore sync --history`` and the schedule in ``lore status``, through
the real command line (and real signals to a real ``lore`` process)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lore.cli.app import app
from test_cli import LORE, indexed_documents, run_lore  # also registers the commands on the app


def watched_project(root: Path, *, pages: int = 2, every: str | None = "1m") -> Path:
    docs = root / "docs"
    docs.mkdir()
    for number in range(pages):
        words = " ".join(f"w{number}x{i}" for i in range(60))
        (docs / f"page-{number:05d}.md").write_text(f"# Page {number}\n\n{words}\n")
    lines = ['db_path = "lore.db"', 'embedder = "hashing"', "", "[[sources]]", 'name = "handbook"',
             'path = "docs"', 'visibility = "all-viewers"']
    if every is not None:
        lines.append(f'every = "{every}"')
    lines += ["", "[vault]", "enabled = false"]  # only the handbook is watched here
    config = root / "lore.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def recorded_runs(db: Path) -> list[tuple[str, str, str]]:
    """``(trigger, status, record)`` of each run, read beside a running lore."""
    try:
        with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
            query = "SELECT trigger, status, record FROM sync_runs ORDER BY started_at"
            return conn.execute(query).fetchall()
    except sqlite3.Error:  # not created yet
        return []


def watch_until(root: Path, condition: Callable[[], object], sig: signal.Signals) -> tuple[int, str, str]:
    """Run ``lore sync --watch`` in ``root``, send ``sig`` once ``condition()`` holds (the
    deadline only guards against hanging, it is not a timing), and return its exit code
    and output."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("LORE_CONFIG", None)
    with subprocess.Popen([str(LORE), "sync", "--watch"], cwd=root, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as running:
        try:
            end = time.monotonic() + 120
            while running.poll() is None and not condition() and time.monotonic() < end:
                time.sleep(0.05)
            running.send_signal(sig)
            stdout, stderr = running.communicate(timeout=300)
        finally:
            running.kill()
    return running.returncode, stdout, stderr


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_watch_runs_due_sources_prints_a_line_and_stops_on_a_signal(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    watched_project(tmp_path)
    db = tmp_path / "lore.db"

    returncode, stdout, stderr = watch_until(tmp_path, lambda: recorded_runs(db), sig)

    assert returncode == code, stderr
    assert "Traceback" not in stderr
    assert "watching handbook every 1m" in stdout
    assert "watch ok" in stdout
    assert "handbook ok: 2 seen, 2 added" in stdout
    ((trigger, status, _),) = recorded_runs(db)
    assert (trigger, status) == ("watch", "ok")


def test_watch_interrupted_mid_sync_exits_130_and_leaves_a_consistent_index(tmp_path: Path) -> None:
    total = 1_500
    watched_project(tmp_path, pages=total)
    db = tmp_path / "lore.db"

    returncode, _, stderr = watch_until(tmp_path, lambda: indexed_documents(db) >= 50, signal.SIGINT)
    written = indexed_documents(db)

    assert returncode == 130, stderr
    assert "Traceback" not in stderr
    assert 0 < written < total, "the watch was not stopped mid-sync"
    ((trigger, status, record),) = recorded_runs(db)
    assert (trigger, status) == ("watch", "failed")
    assert json.loads(record)["error"] == "stopped"
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    resumed = run_lore("sync", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert indexed_documents(db) == total


def test_watch_without_any_cadence_is_a_config_error(tmp_path: Path) -> None:
    watched_project(tmp_path, every=None)

    result = run_lore("sync", "--watch", cwd=tmp_path)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert 'add every = "6h"' in result.stderr


def test_history_and_status_show_the_runs(tmp_path: Path) -> None:
    config = watched_project(tmp_path, every="6h")
    runner = CliRunner()
    assert runner.invoke(app, ["--config", str(config), "sync"]).exit_code == 0
    (tmp_path / "docs" / "page-00001.md").unlink()
    assert runner.invoke(app, ["--config", str(config), "sync"]).exit_code == 0

    table = runner.invoke(app, ["--config", str(config), "sync", "--history"], env={"COLUMNS": "200"})
    as_json = runner.invoke(app, ["--config", str(config), "sync", "--history", "--json", "--limit", "1"])
    status = runner.invoke(app, ["--config", str(config), "status"], env={"COLUMNS": "200"})
    sources = runner.invoke(app, ["--config", str(config), "sources"], env={"COLUMNS": "200"})

    assert table.exit_code == 0, table.output
    rows = [line for line in table.output.splitlines() if "handbook" in line]
    assert len(rows) == 2
    assert [cell.strip() for cell in rows[0].split("│")[2:10]] == [
        "manual", "ok", "handbook", "1", "0", "0", "1", "1"]
    assert as_json.exit_code == 0, as_json.output
    (latest,) = json.loads(as_json.output)
    assert latest["sources"][0]["deleted"] == 1
    assert latest["sources"][0]["forgotten"][0]["uri"].endswith("page-00001.md")
    assert latest["sources"][0]["forgotten"][0]["seconds"] >= 0
    assert status.exit_code == 0, status.output
    assert "ok 20" in status.output
    assert "(every 6h)" in status.output
    assert sources.exit_code == 0, sources.output
    assert "│ 6h " in sources.output


def test_history_of_a_fresh_project_says_there_is_none(tmp_path: Path) -> None:
    config = watched_project(tmp_path)

    result = CliRunner().invoke(app, ["--config", str(config), "sync", "--history"])

    assert result.exit_code == 0
    assert "no sync runs recorded yet" in result.output
    assert not (tmp_path / "lore.db").exists()
