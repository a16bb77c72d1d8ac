"""Run the local model's transformer on OpenVINO instead of PyTorch: the same weights, the
same vectors (checked when the model is converted and whenever PyTorch loads it), about
1.2x the throughput on this project's 2-core AVX2 machines (``bench/embedder_throughput.py``,
docs/embedders.md).

Two ways use the converted model. Loaded through sentence-transformers (sync, and any
process that has PyTorch loaded anyway), sentence-transformers keeps doing everything
around the transformer: tokenizing, sorting by length, batching, prompts, pooling,
normalising; only the module that turns token ids into token embeddings is replaced by one
that calls OpenVINO (``lore.embedders.openvino_torch``). That is how sentence-transformers'
own ``backend="openvino"`` works too, but that backend goes through optimum-intel, which
pins older transformers and huggingface_hub releases than the ones lore runs on;
OpenVINO's ``convert_model`` converts the loaded PyTorch module directly. Queries instead read
the cached model without PyTorch at all (``lore.embedders.local_query``): this module
imports neither torch nor transformers at its top, so finding the cache costs neither.

Converting traces the PyTorch model (4-5 s for MiniLM), so the converted model is kept on
disk, keyed by the model files and the OpenVINO version, and only once it has matched
PyTorch (a ``validated.json`` beside it says so). OpenVINO's own compiled-model cache sits
beside it (``compiled/``), so that compiling it again takes about 0.2 s instead of 0.4 s.
A cache that cannot be written only costs the conversion next time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from lore.errors import EmbeddingError

logger = logging.getLogger(__name__)

#: Part of the cache key: bump when the conversion itself changes.
CONVERSION_VERSION = 1
#: The converted model must reproduce PyTorch's token embeddings this closely (MiniLM's
#: values are of order 1; the two runtimes differ by about 1e-6).
_TOLERANCE = 1e-3
_PROBE = [
    "Pods in CrashLoopBackOff after the node's disk filled up; kubelet evicts them.",
    "etcdNoLeader",
]
MODEL_XML = "model.xml"
#: Written beside a converted model once it matched PyTorch; only then is it used without
#: PyTorch to check it.
_VALIDATED = "validated.json"
#: OpenVINO's compiled-blob cache (the ``CACHE_DIR`` property), beside the model.
_COMPILED = "compiled"
#: How every copy of the model is compiled. The precision is pinned because OpenVINO
#: otherwise runs in bfloat16 on CPUs that have it (AVX512-BF16, AMX: an AMD EPYC of
#: this kind of machine does), which moves MiniLM's token embeddings by up to 0.09, so a
#: copy converted on such a CPU would fail the check against PyTorch and the query path
#: would lose its PyTorch-free start; in f32 the two runtimes agree to about 4e-5.
COMPILE_CONFIG: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}


def _runtime() -> ModuleType:
    """``openvino``, imported without its model converter when nothing has loaded that yet.

    The package's ``__init__`` imports the converter (``openvino.tools.ovc``) inside a
    ``try``/``except ImportError``, as an optional part, and that import is over half of the
    package's import time, spent on every cold query that only compiles a cached model. A
    ``None`` in ``sys.modules`` makes that one import fail as if it were absent; the marker
    is removed at once, so converting (``_cached_or_converted``) still imports the converter
    by its own name when it needs it. Raises ImportError without OpenVINO."""
    loaded = sys.modules.get("openvino")
    if loaded is not None:
        return loaded
    skipped = "openvino.tools.ovc" not in sys.modules
    if skipped:
        sys.modules["openvino.tools.ovc"] = None  # type: ignore[assignment]
    try:
        import openvino
    finally:
        if skipped and sys.modules.get("openvino.tools.ovc", ...) is None:
            del sys.modules["openvino.tools.ovc"]
    module: ModuleType = openvino
    return module


def available() -> bool:
    try:
        _runtime()
    except ImportError:
        return False
    return True


def cache_dir_for(model_dir: Path, cache_dir: Path | None) -> Path | None:
    """Where the model converted from ``model_dir`` is (or would be) cached; None without a
    cache directory or without OpenVINO."""
    if cache_dir is None:
        return None
    try:
        openvino = _runtime()
    except ImportError:
        return None
    return cache_dir / "openvino" / _cache_key(model_dir, openvino.__version__)


def validated_model(model_dir: Path, cache_dir: Path | None) -> Path | None:
    """The cached model.xml converted from ``model_dir``, if one exists that matched PyTorch
    when it was written. Imports OpenVINO, never PyTorch."""
    target = cache_dir_for(model_dir, cache_dir)
    if target is None or not (target / _VALIDATED).is_file() or not (target / MODEL_XML).is_file():
        return None
    return target / MODEL_XML


def discard_cached(model_dir: Path, cache_dir: Path | None) -> bool:
    """Remove the cached copy of ``model_dir`` (a torn or foreign one); whether there was one."""
    target = cache_dir_for(model_dir, cache_dir)
    if target is None or not target.exists():
        return False
    shutil.rmtree(target, ignore_errors=True)
    return True


#: Threads one query inference may use; None leaves it to OpenVINO (every core).
_query_threads: int | None = None


def set_query_threads(threads: int | None) -> None:
    """How many threads each query inference compiled from now on may use. A search server
    sets 1 (``lore.serving.configure_server_process``): MiniLM over a query of a few dozen
    tokens is too little work to split, and OpenVINO's threads waiting on each other cost
    a 2-core machine 30-45 % more CPU per query than one thread does (8.4 against 12.5 ms
    for one query of 11 tokens, 5.1 against 7.3 ms per query in a batch of eight,
    docs/benchmarks.md), CPU that concurrent searches need. One ``lore search`` keeps
    every core: it has nothing else to run meanwhile."""
    global _query_threads
    _query_threads = threads


#: "int8": compile the query model from its int8 copy where there is one
#: (``lore.embedders.query_weights``); "float32": from the converted model itself.
_query_weights: str = "float32"


def set_query_weights(weights: str) -> None:
    """Which weights query models compiled from now on use: a search server sets its
    ``[serve] query_weights`` ("int8" by default); everything else stays on float32."""
    global _query_weights
    _query_weights = weights


def query_weights() -> str:
    return _query_weights


def compile_model(model_xml: Path) -> Any:
    """The model compiled for this CPU, for the lowest latency of one request (a query), with
    OpenVINO's compiled-blob cache beside the model where that can be written."""
    openvino = _runtime()

    config = dict(COMPILE_CONFIG)
    if _query_threads is not None:
        config["INFERENCE_NUM_THREADS"] = _query_threads
    try:
        core = openvino.Core()
        core.set_property({"CACHE_DIR": str(model_xml.parent / _COMPILED)})
        return core.compile_model(str(model_xml), "CPU", config)
    except Exception as err:  # an unwritable cache (a read-only mount) only costs compile time
        logger.debug("compiling %s without OpenVINO's cache: %s", model_xml, err)
    try:
        return openvino.Core().compile_model(str(model_xml), "CPU", config)
    except Exception as err:  # OpenVINO raises RuntimeError and its own kinds
        raise EmbeddingError(f"OpenVINO cannot compile the cached model {model_xml}: {err}") from err


def use_openvino(model: Any, model_dir: Path, cache_dir: Path | None) -> None:
    """Swap the PyTorch transformer inside ``model`` (a loaded SentenceTransformer) for an
    OpenVINO-compiled copy. Raises EmbeddingError, leaving ``model`` as it was, when the
    model cannot be converted or the converted copy computes different embeddings."""
    import openvino
    import torch

    from lore.embedders.openvino_torch import OpenVINOTransformer

    transformer, attribute = _transformer_module(model)
    torch_model = getattr(transformer, attribute)
    probe = dict(model.tokenizer(_PROBE, padding=True, truncation=True, return_tensors="pt"))
    core = openvino.Core()
    target = cache_dir_for(model_dir, cache_dir)
    try:
        ir, converted = _cached_or_converted(core, torch_model, probe, model_dir, target)
        compiled = core.compile_model(ir, "CPU", COMPILE_CONFIG)
        adapter = OpenVINOTransformer(compiled, torch_model.config)
        with torch.inference_mode():
            expected = torch_model(**probe, return_dict=True).last_hidden_state.numpy()
            got = adapter(**probe).last_hidden_state.numpy()
    except EmbeddingError:
        raise
    except Exception as err:  # conversion and inference raise many kinds; all mean "cannot"
        raise EmbeddingError(f"OpenVINO cannot run the model in {model_dir}: {err}") from err
    if got.shape != expected.shape or not np.allclose(got, expected, atol=_TOLERANCE, rtol=0):
        if target is not None and not converted:
            # A cached copy that disagrees must not serve the PyTorch-free query path either.
            shutil.rmtree(target, ignore_errors=True)
        raise EmbeddingError(
            f"OpenVINO's copy of the model in {model_dir} computes different embeddings than PyTorch"
        )
    if target is not None:
        difference = float(np.max(np.abs(got - expected)))
        if converted:
            save_checked(ir, target, difference)
        elif not (target / _VALIDATED).is_file():  # cached by a lore that did not record it
            _write_validated(target, difference)
    setattr(transformer, attribute, adapter)


def _transformer_module(model: Any) -> tuple[Any, str]:
    first = model[0]
    # sentence-transformers 6 keeps the Hugging Face model as ``model``, earlier ones as
    # ``auto_model``; anything else is a model lore does not know how to convert.
    for attribute in ("model", "auto_model"):
        inner = first._modules.get(attribute) if hasattr(first, "_modules") else None
        if inner is not None and hasattr(inner, "config"):
            return first, attribute
    raise EmbeddingError(f"the first module of the model ({type(first).__name__}) is not a transformer")


def _cached_or_converted(
    core: Any, torch_model: Any, probe: dict[str, Any], model_dir: Path, target: Path | None
) -> tuple[Any, bool]:
    """The OpenVINO model, and whether it was converted now (so not yet saved)."""
    if target is not None and (target / MODEL_XML).is_file():
        try:
            return core.read_model(str(target / MODEL_XML)), False
        except Exception as err:  # a torn or foreign file: convert again and replace it
            logger.warning("ignoring unreadable cached OpenVINO model %s: %s", target, err)
            shutil.rmtree(target, ignore_errors=True)
    logger.info("converting %s to OpenVINO (once; later loads read the cached copy)", model_dir)
    transformers_logger = logging.getLogger("transformers")
    level = transformers_logger.level
    with warnings.catch_warnings():
        # Tracing warns about every data-dependent branch of the Hugging Face model, and
        # transformers logs about training-only settings; the check after compiling is
        # what tells whether the conversion is right.
        warnings.simplefilter("ignore")
        transformers_logger.setLevel(logging.ERROR)
        try:
            # by its own name: ``openvino.convert_model`` is absent when ``_runtime`` loaded it
            from openvino.tools.ovc import convert_model

            converted = convert_model(torch_model, example_input=probe)
        finally:
            transformers_logger.setLevel(level)
    return converted, True


def save_checked(converted: Any, target: Path, difference: float) -> None:
    """Cache ``converted`` under ``target`` as checked (``difference``: its largest
    difference from PyTorch's output), whole or not at all."""
    import openvino

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
        openvino.save_model(converted, str(staging / MODEL_XML), compress_to_fp16=False)
        _write_validated(staging, difference)
        try:
            os.replace(staging, target)  # readers see the whole model or none
        except OSError:  # another process saved it first
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as err:
        logger.warning("cannot cache the OpenVINO model under %s: %s", target.parent, err)


def _write_validated(directory: Path, difference: float) -> None:
    record = {"max_abs_difference": difference, "tolerance": _TOLERANCE, "probe": _PROBE}
    try:
        partial = directory / f".{_VALIDATED}.{os.getpid()}"
        partial.write_text(json.dumps(record), encoding="utf-8")
        os.replace(partial, directory / _VALIDATED)
    except OSError as err:
        logger.warning("cannot record the checked OpenVINO model under %s: %s", directory, err)


def _cache_key(model_dir: Path, openvino_version: str) -> str:
    """Changes when the model's files, OpenVINO or the conversion change."""
    files = sorted(
        (path.name, path.stat().st_size, path.stat().st_mtime_ns)
        for path in model_dir.resolve().iterdir()
        if path.is_file()
    )
    material = json.dumps([str(model_dir.resolve()), files, openvino_version, CONVERSION_VERSION])
    return hashlib.sha256(material.encode()).hexdigest()[:24]
