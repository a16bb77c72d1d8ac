"""The PyTorch side of ``lore.embedders.openvino_runtime``: a module that stands in a loaded
SentenceTransformer where the Hugging Face model was, and runs OpenVINO instead.

Kept apart so that ``openvino_runtime`` (imported to find the cached model on the query
path) never imports torch or transformers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lore.errors import EmbeddingError


class OpenVINOTransformer(torch.nn.Module):
    """Called with the tokenizer's tensors, it answers with the token embeddings."""

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
