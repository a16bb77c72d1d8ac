"""A search server's query model with int8 weights (lore.embedders.query_weights): made
once and kept beside the converted model, its vectors within MIN_COSINE of float32's,
and float32 wherever it cannot be used (no NNCF, a failed check, ``query_weights =
"float32"``), while everything but a server stays on float32."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lore.config import LoreSettings
from lore.embedders import openvino_runtime

pytestmark = pytest.mark.slow

TEXTS = [
    "etcdNoLeader",
    "why does the payments-consumer-group fall behind after a broker restart?",
    "Pod payments-api-7d9f in namespace prod is restarting 5 times / 10 minutes",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lore.embedders.local import from_settings

    pytest.importorskip("openvino")
    folder = tmp_path_factory.mktemp("model-cache")
    from_settings(LoreSettings(embedder="local", cache_dir=folder)).embed_documents(["convert once"])
    return folder


@pytest.fixture(autouse=True)
def _plain_process_after() -> Iterator[None]:
    interval = sys.getswitchinterval()
    yield
    openvino_runtime.set_query_weights("float32")
    openvino_runtime.set_query_threads(None)
    sys.setswitchinterval(interval)


def _vectors(cache: Path, weights: str) -> tuple[np.ndarray, object]:
    from lore.embedders.local import from_settings
    from lore.serving import configure_server_process

    settings = LoreSettings(embedder="local", cache_dir=cache)
    configure_server_process(weights)
    model = from_settings(settings)
    vectors = np.stack([model.embed_queries([text])[0] for text in TEXTS])
    return vectors, model._torch_free_encoder()


def _float32(cache: Path) -> np.ndarray:
    from lore.embedders.local import from_settings

    openvino_runtime.set_query_weights("float32")
    model = from_settings(LoreSettings(embedder="local", cache_dir=cache))
    return np.stack([model.embed_queries([text])[0] for text in TEXTS])


def _int8_folder(cache: Path) -> Path:
    from lore.embedders.query_weights import FOLDER

    found = list(cache.rglob(f"{FOLDER}/checked.json"))
    assert len(found) == 1
    return found[0].parent


def test_a_server_embeds_queries_with_int8_weights_close_to_float32(cache: Path) -> None:
    pytest.importorskip("nncf")
    from lore.embedders.query_weights import MIN_COSINE

    exact = _float32(cache)
    served, encoder = _vectors(cache, "int8")
    cosines = np.sum(exact * served, axis=1)
    assert np.all(cosines >= MIN_COSINE), cosines
    assert not np.allclose(served, exact, atol=1e-5)  # it is the int8 copy that answered
    verdict = json.loads((_int8_folder(cache) / "checked.json").read_text())
    assert verdict["accepted"] is True
    assert verdict["min_cosine"] >= MIN_COSINE
    assert encoder is not None


def test_the_int8_copy_is_made_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("nncf")
    first, _ = _vectors(cache, "int8")
    import nncf

    def no_second_time(*args: object, **kwargs: object) -> object:
        raise AssertionError("the kept int8 copy was compressed again")

    monkeypatch.setattr(nncf, "compress_weights", no_second_time)
    again, _ = _vectors(cache, "int8")
    np.testing.assert_allclose(again, first, atol=1e-6)


def test_float32_when_asked_or_when_the_copy_failed_its_check(cache: Path) -> None:
    exact = _float32(cache)
    asked, _ = _vectors(cache, "float32")
    np.testing.assert_allclose(asked, exact, atol=1e-5)
    if "nncf" in sys.modules or _importable("nncf"):
        _vectors(cache, "int8")  # makes the copy
        verdict = _int8_folder(cache) / "checked.json"
        kept = verdict.read_text()
        try:
            verdict.write_text(json.dumps({"accepted": False, "min_cosine": 0.9}))
            rejected, _ = _vectors(cache, "int8")
        finally:
            verdict.write_text(kept)
        np.testing.assert_allclose(rejected, exact, atol=1e-5)


def test_without_nncf_a_server_keeps_float32(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lore.embedders.local import from_settings

    from_settings(LoreSettings(embedder="local", cache_dir=tmp_path)).embed_documents(["convert"])
    exact = _float32(tmp_path)
    monkeypatch.setitem(sys.modules, "nncf", None)  # import nncf raises ImportError
    served, _ = _vectors(tmp_path, "int8")
    np.testing.assert_allclose(served, exact, atol=1e-5)
    assert not list(tmp_path.rglob("query-int8"))


def test_query_weights_is_int8_or_float32() -> None:
    from lore.config import ServeSettings

    assert ServeSettings().query_weights == "int8"
    with pytest.raises(ValueError, match="query_weights"):
        ServeSettings(query_weights="int4")  # type: ignore[arg-type]


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_nncf_is_imported_with_its_telemetry_off() -> None:
    import subprocess

    pytest.importorskip("nncf")
    program = (
        "import os\n"
        "from lore.embedders.query_weights import _import_nncf\n"
        "_import_nncf()\n"
        "from nncf.telemetry.wrapper import NNCFTelemetryStub, telemetry\n"
        "assert isinstance(telemetry, NNCFTelemetryStub), type(telemetry)\n"
        "assert 'NNCF_CI' not in os.environ\n"
    )
    # A process of its own: under pytest NNCF always stubs its telemetry.
    env = {key: value for key, value in os.environ.items() if key != "NNCF_CI"}
    subprocess.run([sys.executable, "-c", program], check=True, env=env, timeout=120)


def test_making_the_int8_copy_prints_nothing(tmp_path: Path) -> None:
    """NNCF logs its statistics table through a handler bound to the stdout it found at
    import, so a redirect did not catch it: it landed in ``lore serve``'s console."""
    import shutil
    import subprocess

    pytest.importorskip("nncf")
    from lore.embedders.local import bundled_model_path
    from lore.embedders.openvino_runtime import cache_dir_for

    model_dir = bundled_model_path()
    built = cache_dir_for(model_dir, tmp_path)
    assert built is not None
    from lore.embedders.bert_graph import ready_model

    model_xml = ready_model(model_dir, tmp_path)
    assert model_xml is not None
    shutil.rmtree(built / "query-int8", ignore_errors=True)
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from lore.embedders import local_query, query_weights\n"
        f"model_dir, model_xml = Path({str(model_dir)!r}), Path({str(model_xml)!r})\n"
        "spec = local_query.pipeline(model_dir)\n"
        "tokenizer = local_query.pipeline_tokenizer(model_dir, spec)\n"
        "def encode(compiled, texts):\n"
        "    return local_query.QueryEncoder(tokenizer, compiled, spec, len(texts)).encode(texts)\n"
        "made = query_weights.int8_model(model_xml, encode)\n"
        "assert made is not None\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == ""
    assert "nncf" not in result.stderr.lower(), result.stderr[-2000:]
