"""The ``lore reembed`` driver and command on the embedded backend: what is refused, how the
index is opened, the prompt, and bad input ending in one line. Every backend runs the
re-embedding scenarios themselves in ``tests/backends/test_reembed_backends.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lore.cli.reembed_cmd as reembed_cmd
from lore.backends.sqlite import SqliteBackend, read_stored_embedder
from lore.cli.app import app
from lore.config import load_settings
from lore.embedders.hashing import HashingEmbedder
from lore.errors import ConfigError, EmbedderMismatchError, EmbeddingError, IndexingError
from lore.protocols import Vectors
from lore.reembed import StoredVectorsEmbedder, open_for_reembed, reembed_index, stored_embedder_of
from lore.sync import EMBEDDER_STATE_KEY
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder

LORE = Path(sys.executable).parent / "lore"

DOCUMENTS = {
    "etcd.md": "The etcdNoLeader alert fires when a member sees no leader.",
    "kafka.md": "Lag on payments-consumer-group grows when a partition is stuck.",
    "vpn.md": "Restart the VPN concentrator from the console.",
}


def build_index(path: Path, embedder: CountingEmbedder | None = None) -> CountingEmbedder:
    embedder = embedder or CountingEmbedder(64)
    with SqliteBackend(path, embedder) as backend:
        for uri, text in DOCUMENTS.items():
            add_document(backend, embedder, uri, text, title=uri.removesuffix(".md"))
    return embedder


def write_config(root: Path, embedder: str = "hashing") -> Path:
    config = root / "lore.toml"
    config.write_text(f'db_path = "lore.db"\nembedder = "{embedder}"\n')
    return config


# -- the driver ---------------------------------------------------------------------------


def test_nothing_to_switch_is_refused(tmp_path: Path) -> None:
    old = build_index(tmp_path / "lore.db")
    with SqliteBackend(tmp_path / "lore.db", old) as backend:
        with pytest.raises(ConfigError, match="already uses"):
            reembed_index(backend, CountingEmbedder(64))
        with pytest.raises(ConfigError, match="batch size"):
            reembed_index(backend, CountingEmbedder(32), batch_size=0)
    with (
        SqliteBackend(tmp_path / "empty.db", old) as empty,
        pytest.raises(ConfigError, match="never been synced"),
    ):
        reembed_index(empty, CountingEmbedder(32))


def test_switch_records_the_embedder_for_status(tmp_path: Path) -> None:
    old = build_index(tmp_path / "lore.db")
    with SqliteBackend(tmp_path / "lore.db", old) as backend:
        reembed_index(backend, HashingEmbedder(128))
        assert backend.get_state(EMBEDDER_STATE_KEY) == (
            '{"model_id": "hashing-128", "dimension": 128, "degraded": true}'
        )


def test_a_searching_process_learns_of_a_reembed_made_by_another(tmp_path: Path) -> None:
    old = build_index(tmp_path / "lore.db")
    with SqliteBackend(tmp_path / "lore.db", old) as searching:
        assert searching.search("etcdNoLeader", top_k=1)  # vectors loaded, generation seen
        with SqliteBackend(tmp_path / "lore.db", StoredVectorsEmbedder("test-counting-64", 64)) as other:
            reembed_index(other, CountingEmbedder(32))
        # Same dimension or not, its query vectors would no longer match the stored ones.
        with pytest.raises(EmbedderMismatchError, match="re-embedded with 'test-counting-32'"):
            searching.search("etcdNoLeader", top_k=1)


class _ForgetfulBackend(SqliteBackend):
    """Loses what it is asked to stage: the driver must stop, not loop for ever."""

    def stage_vectors(self, keys: Sequence[str], vectors: Vectors) -> None:
        pass


def test_a_backend_that_loses_staged_vectors_stops_the_run(tmp_path: Path) -> None:
    old = build_index(tmp_path / "lore.db")
    with _ForgetfulBackend(tmp_path / "lore.db", old) as backend:
        with pytest.raises(IndexingError, match="did not keep"):
            reembed_index(backend, CountingEmbedder(32), batch_size=2)
        assert backend.stored_embedder() == (old.model_id, 64)


def test_wrong_sized_vectors_are_refused(tmp_path: Path) -> None:
    class Liar(CountingEmbedder):
        def embed_documents(self, texts: Sequence[str]) -> Vectors:
            return CountingEmbedder(16).embed_documents(texts)

    old = build_index(tmp_path / "lore.db")
    with SqliteBackend(tmp_path / "lore.db", old) as backend:
        with pytest.raises(EmbeddingError, match="shape"):
            reembed_index(backend, Liar(32))
        with backend.write_lock():
            backend.begin_reembed("test-counting-32", 32)
            with pytest.raises(IndexingError, match="dimension 32"):
                backend.stage_vectors(["key"], CountingEmbedder(16).embed_documents(["text"]))


# -- opening the configured index -----------------------------------------------------------


def test_read_stored_embedder_never_creates_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the SQLite index"):
        read_stored_embedder(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()
    build_index(tmp_path / "lore.db")
    assert read_stored_embedder(tmp_path / "lore.db") == ("test-counting-64", 64)
    SqliteBackend(tmp_path / "fresh.db", CountingEmbedder()).close()
    assert read_stored_embedder(tmp_path / "fresh.db") is None


def test_open_for_reembed(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with pytest.raises(ConfigError, match="run `lore sync` first"):
        open_for_reembed(load_settings(config))
    with pytest.raises(ConfigError, match="holds no index"):
        stored_embedder_of(load_settings(config, backend="none"))

    SqliteBackend(tmp_path / "lore.db", CountingEmbedder()).close()
    assert open_for_reembed(load_settings(config)) is None  # never synced: nothing to do

    build_index(tmp_path / "lore.db")
    index = open_for_reembed(load_settings(config))
    assert index is not None
    try:
        assert index.stored_embedder() == ("test-counting-64", 64)
    finally:
        index.close()


def test_the_stand_in_embedder_never_embeds() -> None:
    stand_in = StoredVectorsEmbedder("some-model", 12)
    assert (stand_in.model_id, stand_in.dimension) == ("some-model", 12)
    with pytest.raises(EmbeddingError, match="not loaded"):
        stand_in.embed_documents(["text"])
    with pytest.raises(EmbeddingError, match="not loaded"):
        stand_in.embed_queries(["text"])


def test_target_settings() -> None:
    current = load_settings(None, embedder="local", embedding_model="some/model")
    assert reembed_cmd.target_settings(current, None, None).embedding_model == "some/model"
    other = reembed_cmd.target_settings(current, "openai", None)
    assert (other.embedder, other.embedding_model) == ("openai", None)
    chosen = reembed_cmd.target_settings(current, "openai", "text-embedding-3-small")
    assert chosen.embedding_model == "text-embedding-3-small"
    with pytest.raises(ConfigError, match="--model"):
        reembed_cmd.target_settings(current, None, " ")


# -- the command ----------------------------------------------------------------------------


def test_cli_switches_to_the_configured_embedder(tmp_path: Path) -> None:
    build_index(tmp_path / "lore.db")
    config = write_config(tmp_path)  # the configuration now names another embedder
    with pytest.raises(EmbedderMismatchError, match="lore reembed"):
        SqliteBackend(tmp_path / "lore.db", HashingEmbedder())

    result = CliRunner().invoke(app, ["--config", str(config), "reembed", "--yes"])

    assert result.exit_code == 0, result.output
    assert "re-embed 3 chunks (3 distinct texts)" in result.output
    assert "test-counting-64 (64 dimensions) -> hashing-384 (384 dimensions)" in result.output
    assert "switched to hashing-384" in result.output
    assert "now configure" not in result.output  # the configuration already says so
    with SqliteBackend(tmp_path / "lore.db", HashingEmbedder()) as backend:
        assert backend.search("etcdNoLeader leader", top_k=1, mode="vector")[0].uri == "etcd.md"

    again = CliRunner().invoke(app, ["--config", str(config), "reembed", "--yes"])
    assert again.exit_code == 0, again.output
    assert "already uses hashing-384" in again.output


def test_cli_with_flags_reminds_to_configure(tmp_path: Path) -> None:
    build_index(tmp_path / "lore.db")
    config = write_config(tmp_path, embedder="local")

    result = CliRunner().invoke(app, ["--config", str(config), "reembed", "--embedder", "hashing", "--yes"])

    assert result.exit_code == 0, result.output
    assert "now configure embedder = 'hashing'" in result.output


def test_cli_declined_prompt_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build_index(tmp_path / "lore.db")
    config = write_config(tmp_path)
    monkeypatch.setattr(reembed_cmd, "interactive", lambda: True)

    result = CliRunner().invoke(app, ["--config", str(config), "reembed"], input="n\n")

    assert result.exit_code == 1, result.output
    assert "nothing changed" in result.output
    assert read_stored_embedder(tmp_path / "lore.db") == ("test-counting-64", 64)


def test_cli_never_synced(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    SqliteBackend(tmp_path / "lore.db", HashingEmbedder()).close()

    result = CliRunner().invoke(app, ["--config", str(config), "reembed", "--yes"])

    assert result.exit_code == 0, result.output
    assert "nothing to re-embed" in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--embedder", "nope"], "unknown embedder 'nope'"),
        (["--embedder", ""], "--embedder needs a name"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    build_index(tmp_path / "lore.db")
    write_config(tmp_path)
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("LORE_CONFIG", None)

    result = subprocess.run(
        [str(LORE), "reembed", *args, "--yes"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert expected in lines[0]
    assert read_stored_embedder(tmp_path / "lore.db") == ("test-counting-64", 64)


def test_cli_without_a_terminal_needs_yes(tmp_path: Path) -> None:
    build_index(tmp_path / "lore.db")
    write_config(tmp_path)
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("LORE_CONFIG", None)

    result = subprocess.run(
        [str(LORE), "reembed"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120,
    )

    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: stdin is not a terminal")
    assert "--yes" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "re-embed 3 chunks" in result.stdout  # the plan is shown, then refused
    assert read_stored_embedder(tmp_path / "lore.db") == ("test-counting-64", 64)


def test_cli_ctrl_c_at_the_prompt_exits_130_with_one_line(tmp_path: Path) -> None:
    build_index(tmp_path / "lore.db")
    write_config(tmp_path)
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("LORE_CONFIG", None)
    terminal, child_end = os.openpty()  # a real terminal on stdin, so lore asks
    try:
        process = subprocess.Popen(
            [str(LORE), "reembed"], cwd=tmp_path, env=env,
            stdin=child_end, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        os.close(child_end)
        assert process.stdout is not None
        asked = b""
        while b"Continue?" not in asked:
            chunk = process.stdout.read1(4096)
            assert chunk, (asked, process.stderr.read() if process.stderr else b"")
            asked += chunk
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        os.close(terminal)

    assert process.returncode == 130, err
    assert err.decode() == "interrupted\n"
    assert read_stored_embedder(tmp_path / "lore.db") == ("test-counting-64", 64)
