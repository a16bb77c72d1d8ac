"""The query model with its weights in int8, for search servers (``[serve] query_weights``).

Almost all of a query's inference is the transformer's fully connected layers (87 % of
9.6 ms for a query of 18 tokens, OpenVINO's own per-layer counters), and over so few
tokens they are bound by reading their weights, not by arithmetic: bfloat16 saved 15-20 %,
int8 weights 44 % (10.7 -> 6.0 ms a query on one thread, alternated in one process). The
query vectors move little: cosine 0.9994-0.9996 to the float32 model's, and on SciFact's
train split hybrid nDCG@10 0.7186 -> 0.7187, vector alone 0.6833 -> 0.6816
(bench/history/benchmarks.md, "int8 query weights"). Documents stay embedded by the float32 model
(sync never uses this), so an index is the same whichever a server uses.

NNCF, OpenVINO's compression library, does the compression (weight-only, int8 asymmetric
per output channel; OpenVINO's CPU kernels read the int8 weights directly). The result is
kept beside the converted model (``query-int8/``), and used only once its vectors for the
probe texts agreed with the float32 model's to ``MIN_COSINE``; without NNCF (the ``serve``
and ``mcp`` extras install it), with a cache that cannot be written, or when the check
fails, the server keeps the float32 model and says so in its log. NNCF's usage telemetry
is switched off before it loads (``_import_nncf``).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from lore.embedders.local_query import Pipeline

logger = logging.getLogger(__name__)

#: The folder beside the converted model.xml that holds its int8 copy.
FOLDER = "query-int8"
#: The int8 copy must give each probe text a vector this close to the float32 one.
MIN_COSINE = 0.998
_VERDICT = "checked.json"
_PROBES = [
    "Pods in CrashLoopBackOff after the node's disk filled up; kubelet evicts them.",
    "etcdNoLeader",
    "why does the payments-consumer-group fall behind after a broker restart?",
    "certificate for api.example.com expires in 3 days",
]


def int8_model(model_xml: Path, tokenizer: Any, spec: Pipeline) -> Path | None:
    """The int8 copy of ``model_xml`` (made and checked on first use), or None when there
    is none to use: the caller then compiles ``model_xml`` itself."""
    folder = model_xml.parent / FOLDER
    verdict = _read_verdict(folder)
    if verdict is not None:
        return folder / model_xml.name if verdict.get("accepted") else None
    try:
        _import_nncf()
    except ImportError:
        logger.info("query model in float32: int8 weights need NNCF (pip install 'lore-sre[serve]')")
        return None
    try:
        return _make(model_xml, folder, tokenizer, spec)
    except OSError as err:  # an unwritable cache: float32, and the same try next start
        logger.info("query model in float32: cannot keep its int8 copy in %s (%s)", folder, err)
        return None


def _import_nncf() -> Any:
    """NNCF, imported with its telemetry off. NNCF reports usage to Google Analytics
    unless a consent file says no; a lore server calls out to nothing it was not
    configured to, and NNCF chooses a stub that sends nothing when ``NNCF_CI`` is set as
    its telemetry module loads (the variable is restored at once)."""
    already = "nncf" in sys.modules
    previous = os.environ.get("NNCF_CI")
    os.environ["NNCF_CI"] = "1"
    try:
        import nncf
    finally:
        if previous is None:
            os.environ.pop("NNCF_CI", None)
        else:
            os.environ["NNCF_CI"] = previous
    if not already:
        # NNCF logs through a handler bound to the stdout it found at import (a redirect
        # later does not catch it): its statistics table would land in the server console.
        logging.getLogger("nncf").setLevel(logging.WARNING)
        from nncf.telemetry.wrapper import NNCFTelemetryStub, telemetry

        if not isinstance(telemetry, NNCFTelemetryStub):
            raise ImportError("NNCF's telemetry could not be turned off")
    return nncf


def _read_verdict(folder: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((folder / _VERDICT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _make(model_xml: Path, folder: Path, tokenizer: Any, spec: Pipeline) -> Path | None:
    nncf = _import_nncf()

    from lore.embedders import openvino_runtime
    from lore.embedders.local_query import QueryEncoder

    openvino = openvino_runtime._runtime()
    core = openvino.Core()
    # NNCF reports its progress on stdout and stderr; a server's logs say what matters.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        compressed = nncf.compress_weights(core.read_model(str(model_xml)))
    staging = Path(tempfile.mkdtemp(prefix=".query-int8-", dir=model_xml.parent))
    try:
        openvino.save_model(compressed, str(staging / model_xml.name))
        config = openvino_runtime.COMPILE_CONFIG
        # The probes embedded as queries are: the same encoder, once per copy.
        probes = len(_PROBES)
        full = QueryEncoder(tokenizer, core.compile_model(str(model_xml), "CPU", config), spec, probes)
        small_model = core.compile_model(str(staging / model_xml.name), "CPU", config)
        small = QueryEncoder(tokenizer, small_model, spec, probes)
        full_vectors, small_vectors = full.encode(_PROBES), small.encode(_PROBES)
        norms = np.linalg.norm(full_vectors, axis=1) * np.linalg.norm(small_vectors, axis=1)
        cosine = float(np.min(np.sum(full_vectors * small_vectors, axis=1) / norms))
        accepted = cosine >= MIN_COSINE
        verdict = {"accepted": accepted, "min_cosine": cosine, "nncf": nncf.__version__}
        (staging / _VERDICT).write_text(json.dumps(verdict), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not accepted:
        logger.warning(
            "query model in float32: its int8 copy's vectors were %.4f from the float32 ones "
            "(at least %.3f wanted)",
            cosine,
            MIN_COSINE,
        )
        return None
    logger.info("query model with int8 weights (cosine %.4f to float32 on the probes)", cosine)
    return folder / model_xml.name
