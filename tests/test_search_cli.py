"""``lore search`` end to end: a real SQLite index on disk, the real CLI entry point."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.cli import main
from lore.cli.search_cmd import os_user
from lore.embedders.hashing import HashingEmbedder
from lore.testing import add_document
from lore.testing.attacks import all_cases, assert_safe, injection_cases, secret_cases

CONFIG = """
backend = "sqlite"
db_path = "index/lore.db"
embedder = "hashing"
audit_path = "audit/lore-audit.jsonl"
top_k = 5

[[sources]]
name = "runbooks"
type = "filesystem"
path = "runbooks"
visibility = "all-viewers"
"""

PAYMENTS_INSPECT = (
    "List the crashlooping payments pods:\n\n```bash\nkubectl -n payments get pods\n"
    "kubectl -n payments logs deploy/payments-api --previous\n```\n"
)
# Terminal escapes and rich markup in retrieved text must reach the screen as inert text.
PAYMENTS_RESTART = (
    "Restart the crashlooping \x1b[31mpayments\x1b[0m [bold]deployment[/bold] \x1b]0;pwned\x07 last."
)


def run_cli(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["lore", *args])
    try:
        main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    captured = capsys.readouterr()
    # rich wraps stderr at the (captured) terminal width; the message itself is one line.
    return code, captured.out, " ".join(captured.err.split())


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lore.toml and an index holding three runbooks; built once, searched read-only."""
    root = tmp_path_factory.mktemp("project")
    (root / "lore.toml").write_text(CONFIG)
    embedder = HashingEmbedder()
    backend = SqliteBackend(root / "index" / "lore.db", embedder)
    try:
        add_document(
            backend, embedder, "runbooks/etcd.md", title="etcd quorum loss",
            sections=[("Recovery", "Restore etcd quorum from the latest snapshot, one member at a time."),
                      ("Diagnosis", "etcdNoLeader fires when members cannot elect a leader.")],
            labels={"service": "etcd"}, source="runbooks",
        )  # fmt: skip
        add_document(
            backend, embedder, "runbooks/kafka.md",
            "Consumer group orders-v2 lags: check the partition reassignment.",
            title="Kafka consumer lag", labels={"service": "kafka"}, source="runbooks",
        )  # fmt: skip
        add_document(
            backend, embedder, "runbooks/payments.md", title="Payments pods crashloop",
            sections=[("Inspect", PAYMENTS_INSPECT), ("Restart", PAYMENTS_RESTART)],
            labels={"service": "payments"}, source="runbooks",
        )  # fmt: skip
        planted = "\n\n".join(case.text for case in [injection_cases()[0], secret_cases()[2]])
        add_document(
            backend, embedder, "runbooks/poisoned.md", f"Poisoned quorum page.\n\n{planted}",
            title="Poisoned page", labels={"service": "evil"}, source="runbooks",
        )  # fmt: skip
    finally:
        backend.close()
    return root


@pytest.fixture
def project(index_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the indexed project; this test's audit log goes to its own ``tmp_path``."""
    monkeypatch.chdir(index_dir)
    for name in ("LORE_CONFIG", "LORE_DB_PATH", "LORE_BACKEND", "LORE_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LORE_AUDIT_PATH", str(tmp_path / "audit.jsonl"))
    return tmp_path


def test_human_output(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["search", "etcd quorum snapshot", "--top-k", "2"], monkeypatch, capsys)
    assert code == 0, err
    assert "etcd quorum loss § Recovery" in out
    assert "runbooks/etcd.md" in out
    assert "updated" in out
    assert "days ago" in out
    assert "(stale)" in out
    assert "score" in out
    assert "Restore etcd quorum" in out
    assert " 1  " in out
    assert " 3  " not in out


def test_json_output_has_every_provenance_field(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(
        ["search", "consumer lag", "--json", "--label", "service=kafka", "--mode", "BM25"],
        monkeypatch,
        capsys,
    )
    assert code == 0
    data = json.loads(out)
    assert data["error"] is None
    assert [p["uri"] for p in data["passages"]] == ["runbooks/kafka.md"]
    first = data["passages"][0]
    for field in ("rank", "title", "section", "uri", "text", "score", "revision", "updated_at", "age_days",
                  "stale", "source_type", "chunk_id"):  # fmt: skip
        assert field in first
    assert first["source_type"] == "filesystem"
    assert first["revision"] == "rev-1"
    assert data["metadata"]["engine"] == "sqlite"
    assert data["metadata"]["result_count"] == 1
    # The hashing embedder takes no part in a BM25 answer: not degraded (a hybrid one is).
    assert data["metadata"]["degraded"] is False
    assert data["metadata"]["degraded_reason"] is None


def test_a_bm25_search_on_the_hashing_embedder_says_nothing_of_it(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["search", "consumer lag", "--mode", "bm25"], monkeypatch, capsys)
    assert code == 0, err
    assert "Kafka consumer lag" in out
    assert "degraded" not in out + err
    code, out, err = run_cli(["search", "consumer lag", "--mode", "hybrid"], monkeypatch, capsys)
    assert code == 0, err
    assert "degraded: a degraded embedder (hashing" in out


def test_safety_chain_and_audit_apply_to_the_cli(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(["search", "poisoned quorum page", "--json"], monkeypatch, capsys)
    assert code == 0
    data = json.loads(out)
    assert "runbooks/poisoned.md" in [p["uri"] for p in data["passages"]]
    assert_safe(data, all_cases())
    assert data["metadata"]["safety"]["instruction_override"] >= 1
    assert data["metadata"]["safety"]["github_token"] >= 1
    code, out, _ = run_cli(["search", "poisoned quorum page"], monkeypatch, capsys)
    assert code == 0
    assert_safe(out, all_cases())
    assert "safety:" in out

    entries = [json.loads(line) for line in (project / "audit.jsonl").read_text().splitlines()]
    assert len(entries) == 2
    assert entries[0]["principal"] == os_user()
    assert entries[0]["query"] == "poisoned quorum page"
    assert "runbooks/poisoned.md" in [hit["uri"] for hit in entries[0]["results"]]


def test_no_match_is_a_normal_answer(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(["search", "etcd", "--label", "service=nothing"], monkeypatch, capsys)
    assert code == 0
    assert "nothing found for 'etcd'" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["search", "etcd", "--label", "service"], "--label must look like key=value"),
        (["search", "etcd", "--label", "=etcd"], "--label must look like key=value"),
        # Labels are matched one value per key: a list would silently match nothing.
        (["search", "etcd", "--label", "tags=etcd,raft"],
         "--label 'tags=etcd,raft': a label filter matches one value, not a list; --label tags=etcd"),
        (["search", "etcd", "--label", "tags=etcd", "--label", "tags=raft"],
         "--label tags given twice ('etcd', 'raft')"),
        # What Python makes of argv bytes that are not UTF-8 (surrogateescape).
        (["search", "etcd", "--label", "tags=\udcff"], "invalid arguments: labels: not valid Unicode text"),
        (["search", "etcd", "--top-k", "0"], "--top-k must be a whole number from 1 to 50, got '0'"),
        (["search", "etcd", "--top-k", "51"], "--top-k must be a whole number from 1 to 50"),
        (["search", "etcd", "-k", "abc"], "--top-k must be a whole number from 1 to 50, got 'abc'"),
        (
            ["search", "etcd", "--mode", "fuzzy"],
            "unknown --mode 'fuzzy'; choose one of: bm25, vector, hybrid",
        ),
        (["search", "   "], "query: must not be blank"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 2
    assert message in err
    assert err.startswith("error: ")
    assert err.count("error:") == 1
    assert "Traceback" not in err + out


def test_missing_index(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LORE_DB_PATH", str(project / "nowhere" / "lore.db"))
    code, _, err = run_cli(["search", "etcd"], monkeypatch, capsys)
    assert code == 2
    assert "no index at" in err
    assert "lore sync" in err
    assert not (project / "nowhere").exists()


def test_empty_index(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    SqliteBackend(project / "empty.db", HashingEmbedder()).close()
    monkeypatch.setenv("LORE_DB_PATH", str(project / "empty.db"))
    code, _, err = run_cli(["search", "etcd"], monkeypatch, capsys)
    assert code == 2
    assert err == "error: the index is empty: run `lore sync` first"


def test_backend_none(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LORE_BACKEND", "none")
    code, _, err = run_cli(["search", "etcd"], monkeypatch, capsys)
    assert code == 2
    assert "no index to search" in err


def test_unwritable_audit_log_refuses_the_search(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "blocker").write_text("")
    monkeypatch.setenv("LORE_AUDIT_PATH", str(project / "blocker" / "audit.jsonl"))
    code, out, err = run_cli(["search", "etcd quorum"], monkeypatch, capsys)
    assert code == 2
    assert "audit log" in err
    assert "could not be written" in err
    assert "Restore etcd" not in out


def test_subprocess_bytes_that_are_not_utf8_are_one_line_and_audited(project: Path, index_dir: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    env.update(LORE_AUDIT_PATH=str(project / "audit.jsonl"), NO_COLOR="1", COLUMNS="200")
    lore = Path(sys.executable).with_name("lore")

    result = subprocess.run(
        [os.fsencode(lore), b"search", b"\xff\xfe etcd"],
        cwd=index_dir, env=env, capture_output=True, timeout=120,
    )

    assert result.returncode == 2, result.stderr
    assert result.stderr.decode() == (
        "error: invalid arguments: query: not valid Unicode text (an unpaired surrogate, or bytes that are "
        "not UTF-8)\n"
    )
    lines = (project / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    (entry,) = [json.loads(line) for line in lines]
    assert entry["error"].startswith("invalid arguments: query: not valid Unicode text")
    assert entry["query"] == "\ufffd\ufffd etcd"


def test_human_output_keeps_line_breaks_and_code_blocks_grouped_by_document(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["search", "crashlooping payments pods", "--label", "service=payments"],
                             monkeypatch, capsys)  # fmt: skip

    assert code == 0, err
    lines = [line.rstrip() for line in out.splitlines()]
    # The code block keeps its lines, not "```bash kubectl -n payments get pods …"; not on
    # a terminal (captured here), each line is the passage's own, fence included.
    assert "kubectl -n payments get pods" in [line.strip() for line in lines]
    assert "kubectl -n payments logs deploy/payments-api --previous" in [line.strip() for line in lines]
    assert "    ```bash" in lines
    # Both sections under one document heading, the provenance shown once.
    assert out.count("Payments pods crashloop") == 1
    assert out.count("runbooks/payments.md") == 1
    assert "Payments pods crashloop § " in out
    assert any(line.lstrip().startswith(("1  ", "2  ")) and "§ " in line and "crashloop" not in line
               for line in lines)  # fmt: skip
    assert "[bold]deployment[/bold]" in out
    assert "\x1b" not in out
    assert "\x07" not in out


def test_rendering_itself_neutralises_terminal_escapes_and_markup() -> None:
    """Even text that skipped the safety chain cannot drive the terminal: the renderer
    shows control characters as escapes (here on a real terminal, colours on)."""
    import io

    from rich.console import Console

    from lore.cli import search_run
    from lore.tool.core import ToolMetadata, ToolPassage, ToolResult

    passage = ToolPassage(
        rank=1, title="T\x1b[2J", section="S", uri="runbooks/x.md", score=1.0, revision="rev-1",
        text="red \x1b[31mEVIL\x1b[0m [bold]x[/bold] [link=https://evil.example]y[/link] \x1b]0;pwned\x07\n\n"
             "```bash\necho \x1b[5mblink\n```\n",
        updated_at="2026-01-01T00:00:00+00:00", age_days=1, stale=False, source_type="filesystem",
        chunk_id="c",
    )  # fmt: skip
    metadata = ToolMetadata(query="q\x1b[8m", engine="sqlite", degraded=False, result_count=1, safety={},
                            truncated=False, latency_ms=1.0)  # fmt: skip
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, color_system="truecolor", width=100)
    original = search_run.console
    search_run.console = terminal
    try:
        search_run._print_human(ToolResult(passages=[passage], metadata=metadata, error=None))
    finally:
        search_run.console = original
    out = screen.getvalue()

    for injected in ("\x1b[31mEVIL", "\x1b]0;", "\x07", "\x1b[2J", "\x1b[5mblink", "\x1b[8m", "\x1b]8;"):
        assert injected not in out
    assert "\\x1b[31mEVIL" in out  # shown, escaped
    assert "[bold]x[/bold]" in out
    assert "[link=https://evil.example]y[/link]" in out


def test_piped_output_is_never_cut_mid_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """rich wraps output that is not a terminal at 80 columns: a passage's long line and
    the provenance line were cut in two for ``| grep`` or ``> file``."""
    long_line = "Drain the node " + " ".join(f"worker-{n:03d}.payments.internal.example" for n in range(6))
    uri = "runbooks/" + "/".join(["very-deeply-nested-folder"] * 4) + "/drain.md"
    (tmp_path / "lore.toml").write_text(CONFIG)
    embedder = HashingEmbedder()
    backend = SqliteBackend(tmp_path / "index" / "lore.db", embedder)
    try:
        add_document(backend, embedder, uri, f"{long_line}\n\nthen cordon it.", title="Drain a node",
                     source="runbooks")  # fmt: skip
    finally:
        backend.close()
    monkeypatch.chdir(tmp_path)
    for name in ("LORE_CONFIG", "LORE_DB_PATH", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    code, out, err = run_cli(["search", "drain the node", "--min-confidence", "none"], monkeypatch, capsys)

    assert code == 0, err
    lines = out.splitlines()
    assert f"    {long_line}" in lines
    assert any(line.startswith(f"    {uri} · ") and " · rev " in line for line in lines), out
    assert [line for line in lines if line != line.rstrip()] == []  # nothing padded to a width


def test_a_terminal_still_gets_rendered_markdown() -> None:
    from rich.console import Console

    from lore.cli import search_run
    from lore.tool.core import ToolMetadata, ToolPassage, ToolResult

    passage = ToolPassage(
        rank=1, title="T", section="S", uri="runbooks/x.md", score=1.0, revision="rev-1",
        text=PAYMENTS_INSPECT, updated_at="2026-01-01T00:00:00+00:00", age_days=1, stale=False,
        source_type="filesystem", chunk_id="c",
    )  # fmt: skip
    metadata = ToolMetadata(query="q", engine="sqlite", degraded=False, result_count=1, safety={},
                            truncated=False, latency_ms=1.0)  # fmt: skip
    screen = io.StringIO()
    original = search_run.console
    search_run.console = Console(file=screen, force_terminal=True, color_system=None, width=100)
    try:
        search_run._print_human(ToolResult(passages=[passage], metadata=metadata, error=None))
    finally:
        search_run.console = original
    out = screen.getvalue()
    assert "kubectl -n payments get pods" in out
    assert "```" not in out


@pytest.mark.parametrize("args", [["search", "etcd quorum"], ["search", "etcd quorum", "--json"], ["status"]])
def test_a_closed_stdout_ends_quietly_with_the_status_of_a_closed_pipe(
    project: Path, index_dir: Path, args: list[str]
) -> None:
    """``lore search ... | head -1``: the reader gone, the command ends as ``git log | head``
    does (128 + SIGPIPE, nothing on stderr), not with status 1 or a traceback; through the
    typer-free search path, the typer path (status) and --json alike."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    env.update(LORE_AUDIT_PATH=str(project / "audit.jsonl"), NO_COLOR="1")
    lore = Path(sys.executable).with_name("lore")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write
    try:
        result = subprocess.run([lore, *args], cwd=index_dir, env=env, stdout=write_end,
                                stderr=subprocess.PIPE, timeout=120)  # fmt: skip
    finally:
        os.close(write_end)

    assert (result.returncode, result.stderr.decode()) == (141, "")
