"""A packaged embedding model as a pair of encoders (passages, queries), and all-mpnet-base-v2 run
from an ONNX file on onnxruntime, as recalld runs MiniLM: what the model probes and the quality
step's second model share."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MPNET_TOKENS = 384
"""mpnet's input limit, its sentence_bert_config.json's max_seq_length."""


@dataclass(frozen=True)
class Encoder:
    """A model's two sides: passages (the chunks as rendered) and questions."""

    name: str
    passages: Callable[[list[str]], np.ndarray]
    queries: Callable[[list[str]], np.ndarray]


def mean_pooled(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Unit vectors of the tokens' mean over the attention mask (mpnet's 1_Pooling/config.json)."""
    weights = mask[..., None].astype(np.float32)
    pooled = (tokens * weights).sum(1) / weights.sum(1)
    return np.asarray(pooled / np.linalg.norm(pooled, axis=1, keepdims=True), dtype=np.float32)


def mpnet_onnx_encoder(folder: Path, path: Path) -> Encoder:
    """mpnet from an ONNX file `export` wrote, on onnxruntime with two threads and its folder's
    tokenizer.json read by `tokenizers` (as recalld runs MiniLM: neither needs PyTorch)."""
    from tokenizers import Tokenizer

    ort = importlib.import_module("onnxruntime")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()  # the file pads to 128: padded per batch below, with mpnet's pad id
    tokenizer.enable_truncation(MPNET_TOKENS)
    pad = tokenizer.token_to_id("<pad>")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def encode(texts: list[str]) -> np.ndarray:
        encodings = tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(texts), width), pad, dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        return mean_pooled(session.run(None, {"input_ids": ids, "attention_mask": mask})[0], mask)

    return Encoder(f"mpnet {path.stem}", encode, encode)
