"""`recalld eval` against a real daemon with the local model: the table, --json, --plot, the floor,
the namespace forgotten afterwards, and the history."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from recalld.actors.index.catch_up import index_chunks
from recalld.actors.index.settings import IndexSettings
from recalld.eval import floor as floors
from tests.support import Daemon
from tests.support.cli import recalld
from tests.support.terminal import in_terminal

DOCS = {
    "kitchen/bread.md": "# Baking sourdough bread\n\nFeed the starter, knead the dough, let it rise overnight "
    "and bake it in a hot oven until the crust is dark.",
    "garden/tomatoes.md": "# Growing tomatoes\n\nPlant the seedlings after the last frost, water them deeply "
    "and tie the stems to stakes as they grow.",
    "car/tyres.md": "# Changing a flat tyre\n\nLoosen the wheel nuts, jack up the car, swap the wheel for the "
    "spare and tighten the nuts in a star pattern.",
    "car/oil.txt": "Engine oil\n\nCheck the dipstick monthly; change the oil and the filter every 10,000 km "
    "with the grade the manual names (e.g. 5W-30).",
    # the garden pages come before the tyres page for any question about trees
    "garden/roses.md": "# Pruning roses\n\nCut the rose canes back in late winter, just above an outward bud.",
    "garden/hedges.md": "# Trimming hedges\n\nTrim the hedge twice a summer and shape the top narrower than the base.",
    "garden/orchard.md": "# Planting fruit trees\n\nPlant young apple and pear trees in autumn, staked against the wind.",
    "garden/lawn.md": "# Mowing the lawn\n\nMow often and never take more than a third of the grass blade at once.",
    "garden/compost.md": "# Making compost\n\nMix green clippings with brown leaves and turn the heap every few weeks.",
    "garden/leaves.md": "# Autumn leaves\n\nRake the fallen leaves from under the trees and pile them to make leaf mould.",
}

QUESTIONS = """
corpus = "a household handbook"

[[question]]
id = "bread"
kind = "natural"
question = "how do I make a loaf with a starter"
expected = "kitchen/bread"

[[question]]
id = "oil"
kind = "identifier"
question = "5W-30"
expected = ["car/oil.txt"]

[[question]]
id = "unanswerable"
kind = "natural"
question = "when should I prune the apple trees"
expected = "car/tyres.md"
"""


def golden_set(root: Path) -> Path:
    golden = root / "handbook"
    for name, text in DOCS.items():
        path = golden / "corpus" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (golden / "questions.toml").write_text(QUESTIONS)
    return golden


def live_records(daemon: Daemon, namespace: str) -> list[Any]:
    status, body = daemon.call("GET", f"/v1/records?namespace={namespace}")
    assert status == 200, body
    return list(body["records"])


def test_eval_reports_judges_the_floor_forgets_its_namespace_and_keeps_history(daemon: Daemon, tmp_path: Path) -> None:
    golden = golden_set(tmp_path)
    plot = tmp_path / "eval.png"

    first = recalld(daemon, "eval", str(golden), "--json", "--plot", str(plot), "--accept")
    assert first.returncode == 0, first.stderr
    run = json.loads(first.stdout)
    # --json is a stable shape (docs/EVAL.md): these fields keep their names and meaning
    assert set(run) == {
        "version",
        "golden",
        "namespace",
        "kept",
        "space",
        "started_at",
        "duration_s",
        "index_wait_s",
        "ingest",
        "routes",
        "floor",
        "misses",
        "passed",
    }
    assert run["version"] == 1
    assert set(run["routes"]["fused"]) == {"kinds", "latency_ms", "fusion", "degraded"}
    assert set(run["floor"]) == {"measure", "path", "space", "verdict", "count", "of", "floor", "accepted"}
    assert run["golden"] | {"source": None, "corpus": None} == {
        "name": "handbook",
        "description": "a household handbook",
        "source": None,
        "corpus": None,
        "files": 10,
        "questions": 3,
        "kinds": {"natural": 2, "identifier": 1},
    }
    assert run["namespace"].startswith("eval-handbook-") and run["kept"] is False
    assert set(run["routes"]) == {"fts", "vector", "fused"}
    fused = run["routes"]["fused"]["kinds"]
    assert set(fused) == {"natural", "identifier", "all"}
    assert set(fused["all"]) == {"hit_at_5", "of", "mrr_at_10", "recall_at_10", "ndcg_at_10"}
    # the unanswerable question is the one miss; it says what came first instead
    assert (fused["all"]["hit_at_5"], fused["all"]["of"]) == (2, 3)
    assert (fused["identifier"]["hit_at_5"], fused["natural"]["hit_at_5"]) == (1, 1)
    (miss,) = [m for m in run["misses"]["fused"] if m["id"] == "unanswerable"] or [None]
    assert miss is not None and miss["expected"] == ["car/tyres.md"]
    assert miss["first"] and "car/tyres.md" not in miss["first"][:1]
    assert run["space"]["provider"] == "local" and run["space"]["dimension"] == 384
    assert run["floor"]["verdict"] == "at_or_above_floor" and run["floor"]["accepted"] == "first_floor"
    assert run["passed"] is True
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the floor file beside the set holds today's count for this space
    written = floors.read(golden / "floor.json")
    (entry,) = written.values()
    assert (entry.count, entry.of) == (2, 3)
    assert entry.space.key == run["space"]["key"]
    # nothing of the eval stays searchable: its namespace's records are forgotten
    assert live_records(daemon, run["namespace"]) == []

    # a floor above today's count fails the eval, and --accept does not lower it
    floors.write(golden / "floor.json", {entry.space.key: floors.Floor(3, 3, entry.space, "by hand")})
    below = recalld(daemon, "eval", str(golden), "--routes", "fused", "--accept", "--quiet")
    assert below.returncode == 1, below.stdout + below.stderr
    assert "BELOW THE FLOOR: 2/3, the floor is 3/3" in below.stdout
    assert "--accept REFUSED" in below.stdout
    assert "unanswerable" in below.stdout  # the misses, with what came first
    assert floors.read(golden / "floor.json")[entry.space.key].count == 3

    # the history lists both runs, newest first, with their figures and verdicts
    history = recalld(daemon, "eval", "--history", str(golden), "--json")
    assert history.returncode == 0, history.stderr
    runs = json.loads(history.stdout)["runs"]
    assert [(r["count"], r["of"], r["floor"], r["verdict"]) for r in runs] == [
        (2, 3, 3, "below_floor"),
        (2, 3, 2, "at_or_above_floor"),
    ]
    assert set(runs[0]["routes"]) == {"fused"} and set(runs[1]["routes"]) == {"fts", "vector", "fused"}
    table = recalld(daemon, "eval", "--history")
    assert table.returncode == 0 and "handbook" in table.stdout and "below_floor" in table.stdout


def test_keep_leaves_the_namespace_and_a_bad_set_is_a_usage_error(daemon: Daemon, tmp_path: Path) -> None:
    golden = golden_set(tmp_path)
    kept = recalld(daemon, "eval", str(golden), "--keep", "--routes", "fts", "--json")
    assert kept.returncode == 0, kept.stderr
    run = json.loads(kept.stdout)
    assert run["kept"] is True and run["floor"]["verdict"] is None
    assert len(live_records(daemon, run["namespace"])) == 10

    # a corpus file ingest leaves out would make questions unanswerable: the run refuses to count
    (golden / "corpus" / "car" / "latin1.txt").write_bytes("Pneus d'\xe9t\xe9".encode("latin-1"))
    partial = recalld(daemon, "eval", str(golden), "--routes", "fts", "--quiet")
    assert partial.returncode == 1
    assert "did not ingest whole" in partial.stderr and "car/latin1.txt: not UTF-8" in partial.stderr

    (golden / "questions.toml").write_text('[[question]]\nquestion = "q"\nexpected = "kitchen/cake.md"\n')
    bad = recalld(daemon, "eval", str(golden))
    assert bad.returncode == 2
    assert "question 1: expected 'kitchen/cake.md' is not a file of the corpus" in bad.stderr


def test_a_skipped_corpus_file_stops_the_eval_unless_allowed_which_lists_it(daemon: Daemon, tmp_path: Path) -> None:
    golden = golden_set(tmp_path)
    (golden / "corpus" / "car" / "empty.md").write_bytes(b"")
    (golden / "corpus" / "car" / "pneus.txt").write_bytes("Pneus d'\xe9t\xe9".encode("latin-1"))
    with (golden / "questions.toml").open("a") as questions:
        questions.write('\n[[question]]\nid = "summer"\nquestion = "summer tyres"\nexpected = "car/pneus.txt"\n')

    stopped = recalld(daemon, "eval", str(golden), "--routes", "fts", "--quiet")
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "did not ingest whole" in stopped.stderr and "--allow-skipped" in stopped.stderr

    allowed = recalld(daemon, "eval", str(golden), "--routes", "fts", "--quiet", "--allow-skipped")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "skipped car/empty.md: empty file" in allowed.stdout
    assert "skipped car/pneus.txt: not UTF-8 text" in allowed.stdout
    assert "counted as misses: summer" in allowed.stdout.split("misses of fts")[0]

    as_json = recalld(daemon, "eval", str(golden), "--routes", "fts", "--allow-skipped", "--json")
    assert as_json.returncode == 0, as_json.stderr
    run = json.loads(as_json.stdout)
    assert [s["file"] for s in run["ingest"]["skipped"]] == ["car/empty.md", "car/pneus.txt"]
    assert run["ingest"]["created"] == 10 and run["ingest"]["unanswerable"] == ["summer"]
    assert run["routes"]["fts"]["kinds"]["all"]["of"] == 4  # its question is asked, and missed
    assert "summer" in [miss["id"] for miss in run["misses"]["fts"]]


def test_the_embedding_bar_counts_the_corpus_chunks_in_a_terminal(daemon: Daemon, tmp_path: Path) -> None:
    golden = golden_set(tmp_path)
    long = "\n\n".join(" ".join(f"manual{p}x{w}" for w in range(80)) + "." for p in range(6))
    (golden / "corpus" / "car" / "manual.md").write_text("# The car's manual\n\n" + long)
    settings = IndexSettings(root=tmp_path)
    files = sorted(p for p in (golden / "corpus").rglob("*") if p.is_file())
    chunks = sum(len(index_chunks(p.read_text(), settings)) for p in files)
    assert chunks > len(files), "a file of several chunks: chunks and records differ"

    status, output = in_terminal(daemon, "eval", str(golden), "--routes", "fts")
    assert status == 0, output
    drawn = [(int(m[1]), int(m[2])) for m in re.finditer(r"embedding \[[#.]{30}\] (\d+)/(\d+) chunks", output)]
    assert drawn, output[-2000:]
    assert {total for _, total in drawn} == {chunks}
    assert [done for done, _ in drawn] == sorted(done for done, _ in drawn) and drawn[-1][0] == chunks
