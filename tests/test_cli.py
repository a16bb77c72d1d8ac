"""``lore sync``, ``lore status`` and ``lore sources``: through typer's CliRunner, and as a
real ``lore`` subprocess to prove bad input ends in one line and a non-zero exit."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import lore.cli.sync_cmd  # registers the commands on the app
from lore.backends.sqlite import SqliteBackend
from lore.cli.app import app
from lore.config import load_settings
from lore.errors import ConfigError, VisibilityError
from lore.resolve import resolve_embedder

LORE = Path(sys.executable).parent / "lore"

OLD_PAGE = """---
title: Legacy VPN runbook
updated: 2020-01-15
---

# Legacy VPN runbook

Restart the VPN concentrator from the console.
"""

FRESH_PAGE = """---
title: Redis evictions
updated: {today}
tags: [redis, cache]
---

# Redis evictions

Check `redis-cli INFO memory` and the eviction policy.
"""


def make_project(
    root: Path, *, visibility: str | None = "all-viewers", source_type: str = "filesystem"
) -> Path:
    docs = root / "docs"
    docs.mkdir()
    (docs / "vpn.md").write_text(OLD_PAGE)
    (docs / "redis.md").write_text(FRESH_PAGE.format(today=datetime.now(UTC).date().isoformat()))
    # Without the built-in playbook pack (tests/test_vault.py), so the counts are the folder's.
    lines = ['db_path = "lore.db"', 'embedder = "hashing"', "", "[vault]", "enabled = false", "",
             "[[sources]]", 'name = "handbook"', f'type = "{source_type}"', 'path = "docs"']
    if visibility is not None:
        lines.append(f'visibility = "{visibility}"')
    config = root / "lore.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def run_lore(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("LORE_CONFIG", None)
    return subprocess.run([str(LORE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_sync_then_status_and_sources(tmp_path: Path, runner: CliRunner) -> None:
    config = make_project(tmp_path)

    first = runner.invoke(app, ["--config", str(config), "sync"])
    second = runner.invoke(app, ["--config", str(config), "sync"])
    status = runner.invoke(app, ["--config", str(config), "status"])
    sources = runner.invoke(app, ["--config", str(config), "sources"])

    assert first.exit_code == 0, first.output
    assert "lore sync" in first.output
    assert second.exit_code == 0, second.output
    assert status.exit_code == 0, status.output
    assert "handbook" in status.output
    assert "hashing-" in status.output
    assert "degraded" in status.output
    assert "last sync: never" not in status.output
    assert sources.exit_code == 0, sources.output
    assert "handbook" in sources.output
    assert "all-viewers" in sources.output


def test_sync_on_a_terminal_shows_progress_then_the_summary(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_project(tmp_path)
    screen = io.StringIO()
    monkeypatch.setattr(lore.cli.sync_cmd, "console", Console(file=screen, force_terminal=True, width=120))

    result = runner.invoke(app, ["--config", str(config), "sync"])

    assert result.exit_code == 0, result.output
    assert "handbook" in screen.getvalue()  # the progress bar's description
    assert "chunks embedded" in screen.getvalue()


def test_status_counts_documents_chunks_and_stale_pages(tmp_path: Path, runner: CliRunner) -> None:
    config = make_project(tmp_path)
    assert runner.invoke(app, ["--config", str(config), "sync"]).exit_code == 0
    settings = load_settings(config)
    backend = SqliteBackend(tmp_path / "lore.db", resolve_embedder(settings))
    try:
        status = lore.cli.sync_cmd.source_status(backend, "handbook", 180, datetime.now(UTC))
    finally:
        backend.close()

    assert (status.documents, status.stale) == (2, 1)
    assert status.chunks >= 2
    assert status.last_synced is not None


def test_status_and_sources_before_any_sync_do_not_create_the_index(
    tmp_path: Path, runner: CliRunner
) -> None:
    config = make_project(tmp_path)

    status = runner.invoke(app, ["--config", str(config), "status"])
    sources = runner.invoke(app, ["--config", str(config), "sources"])

    assert status.exit_code == 0, status.output
    assert "never" in status.output
    assert sources.exit_code == 0, sources.output
    assert not (tmp_path / "lore.db").exists()


def test_sync_exits_1_and_lists_a_failed_document(tmp_path: Path, runner: CliRunner) -> None:
    config = make_project(tmp_path)
    (tmp_path / "docs" / "broken.md").write_bytes(b"# Broken\n\n\xff\xfe\x00 not utf-8")

    result = runner.invoke(app, ["--config", str(config), "sync"])

    assert result.exit_code == 1, result.output
    assert "1 failed" in result.output
    assert "broken.md" in result.output


@pytest.mark.parametrize(
    ("visibility", "source_type", "error", "message"),
    [
        (None, "filesystem", VisibilityError, "does not declare who may read it"),
        ("everyone", "filesystem", ConfigError, "everyone"),
        ("all-viewers", "sharepoint", ConfigError, "sharepoint"),
    ],
)
def test_bad_configuration_raises_a_lore_error(
    tmp_path: Path, runner: CliRunner, visibility: str | None, source_type: str,
    error: type[Exception], message: str,
) -> None:
    config = make_project(tmp_path, visibility=visibility, source_type=source_type)

    result = runner.invoke(app, ["--config", str(config), "sync"])

    assert isinstance(result.exception, error)
    assert message in str(result.exception)
    assert not (tmp_path / "lore.db").exists()


def test_missing_config_file_raises_a_config_error(tmp_path: Path, runner: CliRunner) -> None:
    result = runner.invoke(app, ["--config", str(tmp_path / "nope.toml"), "status"])

    assert isinstance(result.exception, ConfigError)
    assert "config file not found" in str(result.exception)


def assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert expected in lines[0]


def test_subprocess_missing_config(tmp_path: Path) -> None:
    result = run_lore("--config", "missing.toml", "sync", cwd=tmp_path)

    assert_one_line_error(result, "config file not found")


def test_subprocess_undeclared_visibility(tmp_path: Path) -> None:
    make_project(tmp_path, visibility=None)

    result = run_lore("sync", cwd=tmp_path)

    assert_one_line_error(result, "does not declare who may read it")


def test_subprocess_unknown_source_type(tmp_path: Path) -> None:
    make_project(tmp_path, source_type="sharepoint")

    result = run_lore("sync", cwd=tmp_path)

    assert_one_line_error(result, "sharepoint")


def test_subprocess_locked_index(tmp_path: Path) -> None:
    config = make_project(tmp_path)
    holder = SqliteBackend(tmp_path / "lore.db", resolve_embedder(load_settings(config)))
    try:
        with holder.write_lock():
            result = run_lore("sync", cwd=tmp_path)
    finally:
        holder.close()

    assert_one_line_error(result, "")
    assert "lock" in result.stderr.lower()


def test_subprocess_sync_and_status(tmp_path: Path) -> None:
    make_project(tmp_path)

    synced = run_lore("sync", cwd=tmp_path)
    status = run_lore("status", cwd=tmp_path)

    assert synced.returncode == 0, synced.stderr
    assert status.returncode == 0, status.stderr
    assert "handbook" in status.stdout


# -- sync's exits: a missing path, a FIFO, a refused mass delete, Ctrl-C (issue 10, §4-5) ----


def test_subprocess_missing_source_path_exits_2_and_creates_nothing(tmp_path: Path) -> None:
    make_project(tmp_path)
    shutil.rmtree(tmp_path / "docs")

    result = run_lore("sync", cwd=tmp_path)

    assert_one_line_error(result, "source 'handbook': path")
    assert "does not exist" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lore.toml"]


def test_subprocess_a_fifo_in_the_source_is_reported_and_sync_finishes(tmp_path: Path) -> None:
    """Before: reading ``x.md`` blocked forever with the write lock held (run_lore's timeout)."""
    make_project(tmp_path)
    os.mkfifo(tmp_path / "docs" / "x.md")

    first = run_lore("sync", cwd=tmp_path)
    second = run_lore("sync", cwd=tmp_path)  # the lock was released

    assert first.returncode == 1, (first.stdout, first.stderr)
    assert "x.md: not a regular file (a FIFO); skipped" in first.stdout
    assert "added" in first.stdout
    assert second.returncode == 1, (second.stdout, second.stderr)


def test_a_refused_mass_delete_exits_1_and_says_how_to_allow_it(tmp_path: Path, runner: CliRunner) -> None:
    config = make_project(tmp_path)
    for number in range(4):
        (tmp_path / "docs" / f"extra-{number}.md").write_text(f"# Extra {number}\n\nMore text {number}.\n")
    assert runner.invoke(app, ["--config", str(config), "sync"]).exit_code == 0
    for page in (tmp_path / "docs").iterdir():
        page.unlink()  # as if the volume were unmounted

    refused = runner.invoke(app, ["--config", str(config), "sync"])
    allowed = runner.invoke(app, ["--config", str(config), "sync", "--allow-mass-delete"])

    assert refused.exit_code == 1, refused.output
    flat = " ".join(refused.output.split())
    assert "refused to delete 6 of the 6 indexed documents of source handbook" in flat
    assert "--allow-mass-delete" in flat
    assert allowed.exit_code == 0, allowed.output
    assert summary_rows(refused.output)["deleted"] == "0"
    assert summary_rows(allowed.output)["deleted"] == "6"


def summary_rows(output: str) -> dict[str, str]:
    """The figures of sync's summary table (``│ deleted │ 6 │`` rows)."""
    rows = [[cell.strip() for cell in line.strip().strip("│").split("│")] for line in output.splitlines()]
    return {row[0]: row[1] for row in rows if len(row) == 2}


def indexed_documents(db: Path) -> int:
    """Documents committed so far, read beside a running sync (WAL: readers never wait)."""
    try:
        with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
            return int(conn.execute("SELECT count(*) FROM documents").fetchone()[0])
    except sqlite3.Error:  # not created yet
        return 0


def test_subprocess_ctrl_c_exits_130_and_the_next_sync_converges(tmp_path: Path) -> None:
    """A real SIGINT to a real ``lore sync`` in the middle of a corpus of 2,500 pages."""
    make_project(tmp_path)
    total = 2_500 + 2
    for number in range(total - 2):
        words = " ".join(f"w{number}x{i}" for i in range(80))
        (tmp_path / "docs" / f"page-{number:05d}.md").write_text(f"# Page {number}\n\n{words}\n")
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("LORE_CONFIG", None)
    db = tmp_path / "lore.db"
    with subprocess.Popen([str(LORE), "sync"], cwd=tmp_path, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as running:
        try:
            while running.poll() is None and indexed_documents(db) < 50:
                time.sleep(0.05)
            running.send_signal(signal.SIGINT)
            _, stderr = running.communicate(timeout=300)
        finally:
            running.kill()
    written = indexed_documents(db)

    assert running.returncode == 130, stderr
    assert "interrupted" in stderr
    assert "Traceback" not in stderr
    assert 0 < written < total, "the sync was not interrupted mid-run"
    resumed = run_lore("sync", cwd=tmp_path)
    settled = run_lore("sync", cwd=tmp_path)
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    assert indexed_documents(db) == total
    figures = summary_rows(settled.stdout)
    assert (figures["unchanged"], figures["updated"], figures["chunks embedded"]) == (str(total), "0", "0")
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_subprocess_ctrl_c_exits_130_with_one_line(tmp_path: Path) -> None:
    make_project(tmp_path)
    assert run_lore("sync", cwd=tmp_path).returncode == 0
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    server = subprocess.Popen(
        [str(LORE), "mcp"], cwd=tmp_path, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    server.stdin.write(json.dumps(initialize).encode() + b"\n")
    server.stdin.flush()
    assert b'"id":1' in server.stdout.readline()  # serving: now deep inside a command

    server.send_signal(signal.SIGINT)
    _, err = server.communicate(timeout=60)

    assert server.returncode == 130
    assert err.decode() == "interrupted\n"


def test_sources_prints_config_text_with_brackets_as_written(tmp_path: Path) -> None:
    (tmp_path / "docs[old]").mkdir()
    (tmp_path / "lore.toml").write_text(
        'db_path = "lore.db"\nembedder = "hashing"\n\n[[sources]]\nname = "handbook"\n'
        'path = "docs[old]"\nvisibility = "[everyone]"\n'
    )

    result = run_lore("sources", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert "[everyone] (invalid)" in result.stdout
    assert f"{tmp_path}/docs[old]" in result.stdout
