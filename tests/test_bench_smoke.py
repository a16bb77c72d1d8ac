"""The benchmark (bench/run.py) at a tiny scale, so that it does not rot between full runs.

Nothing here asserts a timing: only that every section runs, measures something and
reports it in the shape docs/benchmarks.md describes.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from optional_extras import require_extra

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str) -> ModuleType:
    """bench/ is a folder of scripts, not a package: load a file under a unique name."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"lore_bench_{name.strip('_')}", BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench_run() -> ModuleType:
    return _load("run")


@pytest.fixture(scope="module")
def synthetic() -> ModuleType:
    return _load("_synthetic")


def test_synthetic_corpus_is_deterministic_and_prefix_stable(synthetic: ModuleType, tmp_path: Path) -> None:
    big = synthetic.generate(80, queries=5, seed=3)
    again = synthetic.generate(80, queries=5, seed=3)
    assert big.texts == again.texts
    assert big.queries == again.queries
    np.testing.assert_array_equal(big.vectors, again.vectors)
    np.testing.assert_allclose(np.linalg.norm(big.vectors, axis=1), 1.0, rtol=1e-5)
    assert big.vectors.shape == (80, synthetic.DIMENSION)
    assert any(token in synthetic.identifiers() for token in " ".join(big.texts).split())

    big.save(tmp_path)
    small = synthetic.Corpus.load(tmp_path, 20)
    assert small.texts == big.texts[:20]
    assert len(small.titles) == 3
    written = list(synthetic.documents(small))
    assert [len(chunks) for _, chunks, _ in written] == [8, 8, 4]
    assert all(vectors.shape == (len(chunks), synthetic.DIMENSION) for _, chunks, vectors in written)


def test_tiny_run_measures_every_engine_and_reports_targets(
    bench_run: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_extra("lancedb", "dev")
    out = tmp_path / "bench.json"
    argv = ["--scales", "64", "--backends", "sqlite,lancedb", "--no-corpora", "--queries", "4"]
    argv += ["--no-extract", "--json", str(out)]
    assert bench_run.main(argv) == 0

    printed = capsys.readouterr().out
    for heading in ("3 + 5. Synthetic chunks", "4. lore / LanceDB", "6. Targets"):
        assert heading in printed
    saved = json.loads(out.read_text(encoding="utf-8"))
    cells = {(cell["backend"], cell["scale"]): cell for cell in saved["cells"]}
    assert set(cells) == {("sqlite", 64), ("lancedb", 64)}
    for cell in cells.values():
        assert cell["skipped"] is None, cell
        assert {mode: figures["queries"] for mode, figures in cell["latency"].items()} == {
            "bm25": 4,
            "vector": 4,
            "hybrid": 4,
        }
        assert cell["ingest_chunks_per_s"] > 0
        assert cell["index_bytes"] > 0
        assert cell["peak_rss_mib"] > 0
    # 100k was not run, nor were the corpora: those targets say so instead of passing.
    assert {target["status"] for target in saved["targets"]} == {"n/a"}


def test_extraction_throughput_measures_pdf_and_docx(capsys: pytest.CaptureFixture[str]) -> None:
    throughput = _load("extract_throughput")
    rows = throughput.measure([2], 1)
    assert [(row.kind, row.pages) for row in rows] == [("PDF", 2), ("DOCX", 2)]
    assert all(row.pages_per_s > 0 and row.markdown_chars > 0 for row in rows)
    throughput.report(throughput.Console(width=160), rows)
    assert "pages/s" in capsys.readouterr().out


def test_a_failing_engine_is_reported_as_skipped(bench_run: ModuleType, tmp_path: Path) -> None:
    cells = _load("_cells")
    spec = cells.CellSpec(
        backend="pgvector",
        scale=16,
        data_dir=str(tmp_path / "data"),
        work_dir=str(tmp_path / "work"),
        result_path=str(tmp_path / "result.json"),
    )
    _load("_synthetic").generate(16, queries=2).save(tmp_path / "data")
    result = bench_run.run_cell(spec, tmp_path)  # no server was started for it
    assert result.skipped is not None
    assert "PostgreSQL" in result.skipped


def test_an_ingest_over_its_budget_stops_early_with_its_rate(tmp_path: Path) -> None:
    cells = _load("_cells")
    corpus = _load("_synthetic").generate(160, queries=2)
    embedder = cells.PrecomputedQueries(corpus.queries, corpus.query_vectors)
    spec = cells.CellSpec(
        backend="sqlite", scale=160, data_dir="", work_dir=str(tmp_path), result_path="", ingest_budget_s=1e-6
    )
    with cells.open_lore(spec, embedder) as (index, _), pytest.raises(cells.IngestTooSlow) as stopped:
        cells.ingest_lore(index, corpus, embedder, spec.ingest_budget_s)
    assert stopped.value.rate > 0
    assert "would take" in str(stopped.value)


@pytest.mark.shared
def test_corpus_ingest_and_noop_resync(shared_root: Path) -> None:
    corpora = _load("_corpora")
    results = corpora.measure(
        ["sqlite"],
        None,
        files_per_corpus=3,
        real_files_per_corpus=None,
        queries=[],
        real_embedder=False,
        progress=lambda _: None,
    )
    assert results.skipped is None
    assert len(results.folders) == 3
    (run,) = results.syncs
    assert run.skipped is None
    assert run.documents == 9
    assert run.chunks > 0
    assert run.embedded > 0
    assert run.noop_embedded == (0, 0)
    assert run.noop_seconds is not None


@pytest.mark.slow
@pytest.mark.shared
def test_real_embedder_section(shared_root: Path) -> None:
    corpora = _load("_corpora")
    results = corpora.measure(
        ["sqlite"],
        None,
        files_per_corpus=1,
        real_files_per_corpus=1,
        queries=["etcd has no leader"],
        sync_pattern=False,
        progress=lambda _: None,
    )
    embedder = results.embedder
    assert embedder is not None
    assert embedder.skipped is None
    assert embedder.texts > 0
    assert embedder.pipeline_texts == embedder.texts
    assert embedder.alone_per_s > 0
    assert embedder.ratio > 0
    assert embedder.queries == 1


@pytest.mark.slow
def test_cold_start_measures_fresh_processes(capfd: pytest.CaptureFixture[str]) -> None:
    # capfd, not capsys: the MCP client hands sys.stderr to the server as a file descriptor.
    cold = _load("cold_start")
    samples = cold.measure(1, paths=cold.PATHS[:1])
    assert set(samples) == {("search", cold.PATHS[0].name), ("mcp", cold.PATHS[0].name)}
    for (sample,) in samples.values():
        assert sample.wall_s > 0
        assert sample.cpu_s > 0
    cold.report(cold.Console(width=160), samples, 1)
    printed = capfd.readouterr().out
    assert "lore search (hybrid)" in printed
    assert "lore mcp to 1st result" in printed


def test_git_resync_bench_measures_one_changed_file(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load("git_resync")
    first, changed, unchanged = bench.measure(files=12, rounds=1)
    assert (first.listed, changed.listed, unchanged.listed) == (12, 1, 0)
    assert changed.chunks_embedded >= 1
    assert unchanged.chunks_embedded == 0
    bench.report(bench.Console(width=160), [first, changed, unchanged], 12)
    printed = capsys.readouterr().out
    assert "re-sync, 1 file changed" in printed
    assert "<= 2 s" in printed


def test_confluence_listing_measures_both_deployments(capsys: pytest.CaptureFixture[str]) -> None:
    listing = _load("confluence_listing")
    rows = [row for deployment in ("cloud", "datacenter") for row in listing.measure(deployment, 6, 1, 4)]
    assert [(row.deployment, row.what.split()[0]) for row in rows] == [
        (deployment, what) for deployment in ("cloud", "datacenter")
        for what in ("complete", "incremental,", "conversion")
    ]
    assert all(row.seconds > 0 and row.pages == 6 for row in rows)
    assert rows[0].requests > rows[1].requests > 0, "an incremental listing asks for less"
    listing.report(listing.Console(width=160), rows, 1)
    assert "pages/cpu-s" in capsys.readouterr().out


def test_million_bench_phases_and_fulltext_shape_at_a_tiny_scale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench/perf_million.py's write phases and its full-text comparison, and
    bench/fulltext_shape.py, on 160 chunks (no graph: the threshold is above the count)."""
    million, shape = _load("perf_million"), _load("fulltext_shape")
    assert million.build(tmp_path, 160, 200_000)["ingest_chunks_per_s"] > 0
    assert million.update(tmp_path, 160, 200_000)["update_chunks_per_s"] > 0
    touched = million.touch(tmp_path, 160, 200_000)
    assert {"open_s", "write_s", "release_s", "release_cpu_s"} <= set(touched)

    live = tmp_path / "index-160" / "lore.db.tantivy"
    census = shape.census(live)
    assert census["docs"] == 160
    assert census["segments"] >= 1
    shutil.copytree(live, tmp_path / "fulltext-copy")
    shutil.move(live, tmp_path / "fulltext-grown")
    shape.use_fulltext(tmp_path, 160, "copy")
    shape.use_fulltext(tmp_path, 160, "grown")  # the copy goes back to its own name
    assert live.is_dir()
    assert (tmp_path / "fulltext-copy").is_dir()
    assert not (tmp_path / "fulltext-grown").exists()

    corpus = ["--corpus", str(tmp_path / "corpus-160"), "--queries", "3"]
    assert shape.main([*corpus, str(live), str(tmp_path / "fulltext-copy")]) == 0
    printed = capsys.readouterr().out
    assert "bm25_cpu_p50_ms" in printed
    assert "top10_overlap" in printed
