"""Throughput of the local embedder (all-MiniLM-L6-v2 on the CPU): PyTorch against
OpenVINO (lore's default where installed) and ONNX Runtime, and the knobs that matter on a
small machine: threads, batch size, sorting passages by length before batching.

    .venv/bin/python bench/embedder_throughput.py [--passages 200] [--words 200] [--repeats 3]

Passages are ~200-word windows of the real runbooks in ../shared/corpora. Every
configuration embeds the same passages; repeats run round-robin so that load from other
processes spreads over all rows alike. The table shows the median passages/s, the ratio
to PyTorch's (the reference implementation of the model), and the lowest and mean cosine
similarity between a configuration's vectors and PyTorch's (1.0 = the same vectors).

The ONNX rows export the bundled weights with ``torch.onnx.export`` (offline, no hub),
which needs the ``onnx`` package; without it those rows are skipped. Int8 is ONNX
Runtime's dynamic quantisation of that export.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lore.config import LoreSettings
from lore.embedders.local import LocalEmbedder, from_settings

SHARED_CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"

Encode = Callable[[list[str]], np.ndarray]


def load_passages(count: int, words: int) -> list[str]:
    """The first ``words`` words of each markdown file, in path order: mostly full
    windows, some shorter pages, as a chunker would give."""
    passages: list[str] = []
    for path in sorted(SHARED_CORPORA.rglob("*.md")):
        tokens = path.read_text(encoding="utf-8", errors="replace").split()
        if len(tokens) >= 20:
            passages.append(" ".join(tokens[:words]))
        if len(passages) == count:
            break
    return passages


def torch_encoder(embedder: LocalEmbedder, *, batch: int, sort: bool, threads: int | None) -> Encode:
    import torch

    model = embedder._loaded()

    def encode(texts: list[str]) -> np.ndarray:
        previous = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            if sort:  # sentence-transformers sorts by length inside one encode() call
                return np.asarray(
                    model.encode(texts, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)
                )
            parts = [
                model.encode(
                    texts[i : i + batch], batch_size=batch, normalize_embeddings=True, show_progress_bar=False
                )
                for i in range(0, len(texts), batch)
            ]
            return np.vstack(parts)
        finally:
            torch.set_num_threads(previous)

    return encode


def openvino_encoder(cache_dir: Path) -> Encode | None:
    """What ``embedding_runtime = "auto"`` runs where OpenVINO is installed."""
    embedder = from_settings(LoreSettings(embedder="local", embedding_runtime="auto", cache_dir=cache_dir))
    embedder.embed_documents(["load the model"])
    if embedder.runtime != "openvino":
        return None
    return lambda texts: embedder.embed_documents(texts)


def export_onnx(embedder: LocalEmbedder, directory: Path) -> Path | None:
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
    except ImportError:
        return None
    import torch

    model = embedder._loaded()
    transformer = model[0].auto_model.eval()

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = model.tokenizer(["a warm-up sentence", "two"], padding=True, return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    path = directory / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Wrapped(),
            tuple(sample[name] for name in names),
            str(path),
            input_names=names,
            output_names=["hidden"],
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in [*names, "hidden"]},
            opset_version=17,
            dynamo=False,
        )
    return path


def quantize(path: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = path.with_name("model-int8.onnx")
    quantize_dynamic(str(path), str(target), weight_type=QuantType.QInt8)
    return target


def onnx_encoder(embedder: LocalEmbedder, path: Path, *, batch: int, threads: int) -> Encode:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    tokenizer = embedder._loaded().tokenizer
    max_length = embedder.max_input_tokens

    def encode(texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), embedder.dimension), dtype=np.float32)
        order = np.argsort([-len(text) for text in texts], kind="stable")
        for start in range(0, len(texts), batch):
            rows = order[start : start + batch]
            encoded = tokenizer(
                [texts[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="np",
            )
            feed = {
                name: encoded[name].astype(np.int64)
                for name in ("input_ids", "attention_mask", "token_type_ids")
            }
            hidden = session.run(None, feed)[0]
            mask = encoded["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    return encode


@dataclass
class Row:
    name: str
    encode: Encode
    seconds: list[float]
    vectors: np.ndarray | None = None


def measure(rows: Sequence[Row], passages: list[str], repeats: int) -> None:
    for row in rows:
        row.encode(passages[:4])  # warm-up: lazy initialisation, allocator
    for _ in range(repeats):
        for row in rows:
            start = time.perf_counter()
            row.vectors = row.encode(passages)
            row.seconds.append(time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if not SHARED_CORPORA.is_dir():
        print(f"skipped: {SHARED_CORPORA} is absent (real runbook corpora)", file=sys.stderr)
        return 0

    import torch

    passages = load_passages(args.passages, args.words)
    embedder = from_settings(LoreSettings(embedder="local", embedding_runtime="torch"))
    tokens = [
        len(ids)
        for ids in embedder._loaded().tokenizer(
            passages, truncation=True, max_length=embedder.max_input_tokens
        )["input_ids"]
    ]
    cores = torch.get_num_threads()
    rows = [
        Row(
            f"torch  batch 32, sorted, {cores} threads",
            torch_encoder(embedder, batch=32, sort=True, threads=None),
            [],
        ),
        Row("torch  batch 32, unsorted", torch_encoder(embedder, batch=32, sort=False, threads=None), []),
        Row("torch  batch 8, sorted", torch_encoder(embedder, batch=8, sort=True, threads=None), []),
        Row("torch  batch 64, sorted", torch_encoder(embedder, batch=64, sort=True, threads=None), []),
        Row("torch  batch 32, sorted, 1 thread", torch_encoder(embedder, batch=32, sort=True, threads=1), []),
    ]
    with tempfile.TemporaryDirectory() as scratch:
        openvino = openvino_encoder(Path(scratch))
        if openvino is None:
            print("note: OpenVINO row skipped (the openvino package is not installed)", file=sys.stderr)
        else:
            rows.insert(1, Row("openvino batch 32, sorted (lore default)", openvino, []))
        exported = export_onnx(embedder, Path(scratch))
        if exported is None:
            print("note: ONNX rows skipped (pip install onnx to export the model)", file=sys.stderr)
        else:
            rows.append(
                Row(
                    f"onnx   fp32, batch 32, sorted, {cores} threads",
                    onnx_encoder(embedder, exported, batch=32, threads=cores),
                    [],
                )
            )
            rows.append(
                Row(
                    f"onnx   int8, batch 32, sorted, {cores} threads",
                    onnx_encoder(embedder, quantize(exported), batch=32, threads=cores),
                    [],
                )
            )
        measure(rows, passages, args.repeats)

    print(
        f"{len(passages)} passages of <= {args.words} words "
        f"({statistics.mean(tokens):.0f} tokens on average, cut at {embedder.max_input_tokens}); "
        f"median of {args.repeats} round-robin repeats; torch {torch.__version__}, {cores} threads"
    )
    reference = rows[0]
    assert reference.vectors is not None
    base_rate = len(passages) / statistics.median(reference.seconds)
    print(f"{'configuration':<46} {'passages/s':>11} {'vs torch':>11} {'cosine min':>11} {'mean':>7}")
    for row in rows:
        assert row.vectors is not None
        rate = len(passages) / statistics.median(row.seconds)
        cosines = np.sum(row.vectors * reference.vectors, axis=1)
        print(
            f"{row.name:<46} {rate:>11.1f} {rate / base_rate:>10.2f}x "
            f"{float(cosines.min()):>11.4f} {float(cosines.mean()):>7.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
