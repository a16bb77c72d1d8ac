"""What a new user runs into in the first hour, each as a real ``lore`` subprocess on real
files and a real SQLite index: a wrong input ends in one line (exit 2 for config and usage
errors), and a sync that found nothing says so instead of printing a summary of zeros."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from optional_extras import require_extra
from test_cli import LORE, assert_one_line_error, make_project, run_lore


def test_an_unreachable_postgresql_is_one_line_though_libpq_adds_a_hint(tmp_path: Path) -> None:
    require_extra("psycopg", "pgvector")
    # Port 1 on the loopback: nothing listens, so libpq's "Is the server running ...?" hint
    # follows its message on a second, indented line.
    (tmp_path / "lore.toml").write_text(
        'backend = "pgvector"\nembedder = "hashing"\npg_dsn = "postgresql://lore@127.0.0.1:1/lore"\n'
    )

    result = run_lore("search", "etcd", cwd=tmp_path)

    assert_one_line_error(result, "is unreachable")


def test_a_golden_set_that_is_not_yaml_is_one_line(tmp_path: Path) -> None:
    make_project(tmp_path)
    (tmp_path / "golden.yaml").write_text("- question: [unclosed\n")

    result = run_lore("eval", "golden", "golden.yaml", cwd=tmp_path)

    assert_one_line_error(result, "golden.yaml: not valid YAML")
    assert "line 2, column 1" in result.stderr


def test_a_config_that_is_a_directory_says_so(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()

    result = run_lore("--config", "conf", "status", cwd=tmp_path)

    assert_one_line_error(result, "config file conf is a directory")


def test_lore_config_naming_a_directory_says_so(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()

    result = subprocess.run(
        [str(LORE), "status"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "LORE_CONFIG": "conf", "NO_COLOR": "1"},
    )  # fmt: skip

    assert_one_line_error(result, "LORE_CONFIG points to a directory, conf")


def test_a_source_path_of_the_wrong_type_names_what_to_write(tmp_path: Path) -> None:
    config = make_project(tmp_path)
    config.write_text(config.read_text().replace('path = "docs"', "path = 5"))

    result = run_lore("sync", cwd=tmp_path)

    assert_one_line_error(result, "path: should be a path, written as a string, not 5")
    assert "class" not in result.stderr


def test_an_empty_folder_is_named_after_sync_and_search_does_not_say_run_sync(tmp_path: Path) -> None:
    make_project(tmp_path)
    for page in (tmp_path / "docs").iterdir():
        page.unlink()

    synced = run_lore("sync", cwd=tmp_path)
    searched = run_lore("search", "redis", cwd=tmp_path)

    assert synced.returncode == 0, synced.stderr
    assert "source 'handbook' listed no documents: check its path and include/exclude globs" in synced.stdout
    assert_one_line_error(searched, "the last `lore sync` found no documents")
    assert "run `lore sync` first" not in searched.stderr


def test_search_before_any_sync_still_says_run_sync_first(tmp_path: Path) -> None:
    make_project(tmp_path)
    run_lore("status", cwd=tmp_path)

    result = run_lore("search", "redis", cwd=tmp_path)

    assert_one_line_error(result, "run `lore sync` first")


def test_a_folder_with_documents_gets_no_empty_source_note(tmp_path: Path) -> None:
    make_project(tmp_path)

    synced = run_lore("sync", cwd=tmp_path)

    assert synced.returncode == 0, synced.stderr
    assert "listed no documents" not in synced.stdout


@pytest.mark.parametrize(
    ("command", "module", "extra"), [(["serve"], "fastapi", "serve"), (["mcp", "--http"], "mcp", "mcp")]
)
def test_a_port_in_use_is_one_line_before_anything_says_serving(
    tmp_path: Path, command: list[str], module: str, extra: str
) -> None:
    require_extra(module, extra)
    make_project(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = run_lore(*command, "--port", str(port), cwd=tmp_path)

    assert_one_line_error(result, f"cannot listen on 127.0.0.1:{port}: the port is in use")
    assert "serving" not in result.stderr
    assert "MCP server on" not in result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("token", "create"), "Missing option '--role'. See 'lore token create --help'."),
        (("events", "--limit", "0"), "Invalid value for '--limit'"),
        (("feedback",), "Missing argument 'event_id'. See 'lore feedback --help'."),
        (("serch", "etcd"), "No such command 'serch'. Did you mean 'search'"),
        (("search", "etcd", "--no-such-option"), "No such option: --no-such-option"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_help_to_read(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    make_project(tmp_path)

    result = run_lore(*args, cwd=tmp_path)

    assert_one_line_error(result, said)
    assert result.returncode == 2
