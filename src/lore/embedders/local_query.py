"""Query embedding without PyTorch: the model's own fast tokenizer (``tokenizers``, from its
tokenizer.json), the cached OpenVINO model, and sentence-transformers' pooling redone in numpy.

Importing torch, transformers and sentence-transformers costs about 7 s of a cold
``lore search``; embedding one query costs milliseconds. So a process that only searches
(``lore search``, ``lore mcp``) never imports them once a sync has converted the model and
checked the conversion against PyTorch (``openvino_runtime.validated_model``).

Only the models whose whole pipeline is reproduced here take this path: a Transformer at
the model root, then mean pooling, then optionally Normalize, with no prompts and no
lower-casing by sentence-transformers itself (all-MiniLM-L6-v2 is exactly that).
``pipeline()`` says why any other model does not, and it keeps the PyTorch path. The steps
are those of sentence-transformers 6: tokenize with truncation at ``max_seq_length`` (capped
by the model's position embeddings) and padding to the longest text of a batch, run the
transformer, average the token embeddings under the attention mask (a count clamped at
1e-9), divide by the L2 norm (clamped at 1e-12). The vectors equal sentence-transformers'
within 1e-5 (tests/test_local_embedder.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from lore.errors import EmbeddingError

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
#: sentence_bert_config.json keys whose meaning is reproduced here.
_KNOWN_SBERT_KEYS = frozenset({"max_seq_length", "do_lower_case"})
_MODEL_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})


class Unsupported(Exception):
    """This model's pipeline is not the one reproduced here (the message says how)."""


class Pipeline(NamedTuple):
    """What sentence-transformers does around the transformer, read from the model's files.
    (A named tuple: the forked query worker imports this module, and dataclasses would
    cost it the import of inspect.)"""

    max_seq_length: int
    normalize: bool
    pad_token: str


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise Unsupported(f"unreadable {path.name}: {err}") from err


def _dict(path: Path) -> dict[str, Any]:
    data = _json(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Unsupported(f"{path.name} is not a JSON object")
    return data


def pipeline(model_dir: Path) -> Pipeline:
    """The model's pipeline, or Unsupported when it is not Transformer -> mean Pooling ->
    (Normalize) with nothing else that changes the text or the vector."""
    modules = _json(model_dir / "modules.json")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise Unsupported("modules.json is not a list of modules")
    types = [str(module.get("type")) for module in modules]
    if types not in ([_TRANSFORMER, _POOLING], [_TRANSFORMER, _POOLING, _NORMALIZE]):
        raise Unsupported(f"modules {types} are not Transformer, Pooling[, Normalize]")
    if str(modules[0].get("path", "")) != "":
        raise Unsupported("the transformer is not at the model root")
    if not (model_dir / "tokenizer.json").is_file():
        raise Unsupported("no tokenizer.json (a fast tokenizer) in the model directory")
    _check_pooling(_dict(model_dir / str(modules[1].get("path", "")) / "config.json"))
    sbert = _dict(model_dir / "sentence_bert_config.json")
    unknown = set(sbert) - _KNOWN_SBERT_KEYS
    if unknown or sbert.get("do_lower_case"):
        raise Unsupported(f"sentence_bert_config.json sets {sorted(unknown) or 'do_lower_case'}")
    st_config = _dict(model_dir / "config_sentence_transformers.json")
    if st_config.get("prompts") or st_config.get("default_prompt_name"):
        raise Unsupported("the model declares prompts")
    tokenizer_config = _dict(model_dir / "tokenizer_config.json")
    length = sbert.get("max_seq_length", tokenizer_config.get("model_max_length"))
    positions = _dict(model_dir / "config.json").get("max_position_embeddings")
    if not isinstance(length, int) or length < 2:
        raise Unsupported("no max_seq_length")
    if isinstance(positions, int) and positions > 0:
        length = min(length, positions)
    pad = tokenizer_config.get("pad_token", "[PAD]")
    return Pipeline(max_seq_length=length, normalize=len(types) == 3, pad_token=str(pad))


def _check_pooling(config: dict[str, Any]) -> None:
    # sentence-transformers 2-5 write one boolean per mode; 6 may write "pooling_mode".
    mode = config.get("pooling_mode")
    if mode is not None:
        mean_only = mode == "mean" or mode == ["mean"]
    else:
        flags = {key: value for key, value in config.items() if key.startswith("pooling_mode_")}
        mean_only = flags.get("pooling_mode_mean_tokens") is True and not any(
            value for key, value in flags.items() if key != "pooling_mode_mean_tokens"
        )
    if not mean_only:
        raise Unsupported("the pooling is not mean pooling alone")
    if config.get("include_prompt") is False:
        raise Unsupported("the pooling excludes prompt tokens")


class QueryEncoder:
    """Embeds texts as sentence-transformers would, with OpenVINO and numpy only. Safe to
    call from several threads: the tokenizer is configured once and one OpenVINO request is
    made per call."""

    def __init__(self, tokenizer: Any, compiled: Any, spec: Pipeline, batch_size: int) -> None:
        self._tokenizer = tokenizer
        self._compiled = compiled
        self._spec = spec
        self._batch_size = batch_size
        pad_id = tokenizer.token_to_id(spec.pad_token)
        self._pad_id = int(pad_id) if pad_id is not None else 0
        self._inputs: list[tuple[str, npt.DTypeLike]] = []
        for port in compiled.inputs:
            name = port.get_any_name()
            if name not in _MODEL_INPUTS:
                raise EmbeddingError(f"the cached OpenVINO model wants an input {name!r} lore does not make")
            self._inputs.append((name, port.get_element_type().to_dtype()))
        names = {name for output in compiled.outputs for name in output.get_names()}
        self._output = compiled.output("last_hidden_state" if "last_hidden_state" in names else 0)

    @classmethod
    def load(cls, model_dir: Path, model_xml: Path, spec: Pipeline, batch_size: int) -> QueryEncoder:
        return cls(*compiled_parts(model_dir, model_xml, spec), spec, batch_size)

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        encodings = self._tokenizer.encode_batch(list(texts))
        # Longest first, as sentence-transformers orders a batch, so that padding is least.
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        size = self._batch_size
        batches = [order[start : start + size] for start in range(0, len(order), size)]
        if not batches:
            raise EmbeddingError("nothing to embed")
        first = self._embed_batch([encodings[i] for i in batches[0]])
        out = np.empty((len(encodings), first.shape[1]), dtype=np.float32)
        out[batches[0]] = first
        for rows in batches[1:]:
            out[rows] = self._embed_batch([encodings[i] for i in rows])
        return out

    def _embed_batch(self, encodings: Sequence[Any]) -> npt.NDArray[np.float32]:
        length = max(len(encoding.ids) for encoding in encodings)
        ids = np.full((len(encodings), length), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), length), dtype=np.int64)
        types = np.zeros((len(encodings), length), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            size = len(encoding.ids)
            ids[row, :size] = encoding.ids
            mask[row, :size] = 1
            types[row, :size] = encoding.type_ids
        columns = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feed = {name: columns[name].astype(dtype, copy=False) for name, dtype in self._inputs}
        try:
            result = self._compiled.create_infer_request().infer(feed)
        except Exception as err:  # OpenVINO raises RuntimeError and its own kinds
            raise EmbeddingError(f"OpenVINO failed to embed: {err}") from err
        hidden = np.asarray(result[self._output], dtype=np.float32)
        weights = mask[:, :, None].astype(np.float32)
        summed = (hidden * weights).sum(axis=1)
        vectors: npt.NDArray[np.float32] = summed / np.clip(weights.sum(axis=1), 1e-9, None)
        if self._spec.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.clip(norms, 1e-12, None)
        return vectors.astype(np.float32, copy=False)


def compiled_parts(model_dir: Path, model_xml: Path, spec: Pipeline) -> tuple[Any, Any]:
    """The tokenizer configured as sentence-transformers uses it and the compiled model:
    what a ``QueryEncoder`` is made of, and all that loading one costs."""
    from lore.embedders import openvino_runtime

    tokenizer = pipeline_tokenizer(model_dir, spec)
    if openvino_runtime.query_weights() == "int8":
        from lore.embedders.query_weights import int8_model

        model_xml = int8_model(model_xml, tokenizer, spec) or model_xml
    return tokenizer, openvino_runtime.compile_model(model_xml)


def pipeline_tokenizer(model_dir: Path, spec: Pipeline) -> Any:
    """The model's fast tokenizer, truncating and padding as sentence-transformers does."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    except Exception as err:  # tokenizers raises a bare Exception for a bad file
        raise EmbeddingError(f"cannot read {model_dir / 'tokenizer.json'}: {err}") from err
    # tokenizer.json carries its own truncation and padding (128 for MiniLM);
    # sentence-transformers truncates at max_seq_length and pads to the batch's longest.
    tokenizer.enable_truncation(max_length=spec.max_seq_length, strategy="longest_first")
    tokenizer.no_padding()
    return tokenizer
