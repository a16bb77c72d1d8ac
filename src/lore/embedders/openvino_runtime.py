"""Run the local model's transformer on OpenVINO instead of PyTorch: the same weights, the
same vectors (checked when the model loads), about 1.2x the throughput on this project's
2-core AVX2 machines (``bench/embedder_throughput.py``, docs/embedders.md).

sentence-transformers keeps doing everything around the transformer: tokenizing, sorting
by length, batching, prompts, pooling, normalising. Only the module that turns token ids
into token embeddings is replaced by one that calls OpenVINO. That is how
sentence-transformers' own ``backend="openvino"`` works too, but that backend goes through
optimum-intel, which pins older transformers and huggingface_hub releases than the ones lore
runs on; ``openvino.convert_model`` converts the loaded PyTorch module directly.

Converting traces the PyTorch model (4-5 s for MiniLM), so the converted model is kept on
disk, keyed by the model files and the OpenVINO version; reading it back and compiling
takes about 0.5 s. A cache that cannot be written only costs the conversion next time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

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
_MODEL_XML = "model.xml"


def available() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def use_openvino(model: Any, model_dir: Path, cache_dir: Path | None) -> None:
    """Swap the PyTorch transformer inside ``model`` (a loaded SentenceTransformer) for an
    OpenVINO-compiled copy. Raises EmbeddingError, leaving ``model`` as it was, when the
    model cannot be converted or the converted copy computes different embeddings."""
    import openvino

    transformer, attribute = _transformer_module(model)
    torch_model = getattr(transformer, attribute)
    probe = dict(model.tokenizer(_PROBE, padding=True, truncation=True, return_tensors="pt"))
    core = openvino.Core()
    try:
        ir = _cached_or_converted(core, torch_model, probe, model_dir, cache_dir)
        compiled = core.compile_model(ir, "CPU", {"PERFORMANCE_HINT": "LATENCY"})
        adapter = OpenVINOTransformer(compiled, torch_model.config)
        with torch.inference_mode():
            expected = torch_model(**probe, return_dict=True).last_hidden_state.numpy()
            got = adapter(**probe).last_hidden_state.numpy()
    except EmbeddingError:
        raise
    except Exception as err:  # conversion and inference raise many kinds; all mean "cannot"
        raise EmbeddingError(f"OpenVINO cannot run the model in {model_dir}: {err}") from err
    if got.shape != expected.shape or not np.allclose(got, expected, atol=_TOLERANCE, rtol=0):
        raise EmbeddingError(
            f"OpenVINO's copy of the model in {model_dir} computes different embeddings than PyTorch"
        )
    setattr(transformer, attribute, adapter)


class OpenVINOTransformer(torch.nn.Module):
    """Stands where sentence-transformers keeps the Hugging Face model: called with the
    tokenizer's tensors, it answers with the token embeddings."""

    def __init__(self, compiled: Any, config: Any) -> None:
        super().__init__()
        self.compiled = compiled
        self.config = config  # sentence-transformers reads the model's config
        self._inputs = [port.get_any_name() for port in compiled.inputs]

    def forward(self, **features: Any) -> Any:
        from transformers.modeling_outputs import BaseModelOutput

        try:
            feed = {name: features[name].cpu().numpy() for name in self._inputs}
        except KeyError as err:
            raise EmbeddingError(f"the tokenizer gave no {err.args[0]!r}, which the model needs") from err
        # One request per call: the HTTP service may embed from several threads at once.
        outputs = self.compiled.create_infer_request().infer(feed)
        hidden = torch.from_numpy(np.array(outputs[0], copy=True))
        # Indexable both as [0] (sentence-transformers before 6) and by name (6 and later).
        return BaseModelOutput(last_hidden_state=hidden)


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
    core: Any, torch_model: Any, probe: dict[str, Any], model_dir: Path, cache_dir: Path | None
) -> Any:
    import openvino

    target = cache_dir / "openvino" / _cache_key(model_dir, openvino.__version__) if cache_dir else None
    if target is not None and (target / _MODEL_XML).is_file():
        try:
            return core.read_model(str(target / _MODEL_XML))
        except Exception as err:  # a torn or foreign file: convert again and replace it
            logger.warning("ignoring unreadable cached OpenVINO model %s: %s", target, err)
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
            converted = openvino.convert_model(torch_model, example_input=probe)
        finally:
            transformers_logger.setLevel(level)
    if target is not None:
        _save(converted, target)
    return converted


def _save(converted: Any, target: Path) -> None:
    import openvino

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
        openvino.save_model(converted, str(staging / _MODEL_XML), compress_to_fp16=False)
        try:
            os.replace(staging, target)  # readers see the whole model or none
        except OSError:  # another process saved it first
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as err:
        logger.warning("cannot cache the OpenVINO model under %s: %s", target.parent, err)


def _cache_key(model_dir: Path, openvino_version: str) -> str:
    """Changes when the model's files, OpenVINO or the conversion change."""
    files = sorted(
        (path.name, path.stat().st_size, path.stat().st_mtime_ns)
        for path in model_dir.resolve().iterdir()
        if path.is_file()
    )
    material = json.dumps([str(model_dir.resolve()), files, openvino_version, CONVERSION_VERSION])
    return hashlib.sha256(material.encode()).hexdigest()[:24]
