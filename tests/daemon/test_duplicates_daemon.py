"""Semantic duplicate warnings end to end (SPEC §5): real daemons, the real local model, real
PostgreSQL; a loopback OpenAI-compatible server where the test must control the vectors or the
provider's failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest

from actors.duplicates import title_text
from tests.support import ROOT, Daemon, sql
from tests.support.fake_openai import FakeOpenAI, unit_vector

POLL_S = 0.2


def create(daemon: Daemon, ns: str, title: str, kind: str = "story", body: str = "") -> dict[str, Any]:
    status, created = daemon.call("POST", "/v1/records", {"namespace": ns, "kind": kind, "title": title, "body": body})
    assert status == 201, created
    return dict(created)


def dry_run(daemon: Daemon, ns: str, title: str, kind: str = "story") -> dict[str, Any]:
    status, answer = daemon.call("POST", "/v1/duplicates/check", {"namespace": ns, "kind": kind, "title": title})
    assert status == 200, answer
    return dict(answer)


def wait_comparable(daemon: Daemon, ns: str, of: int, kind: str = "story", timeout: float = 120.0) -> None:
    """Until every live title of the namespace and kind has its stored vector (the index
    manager's catch-up embeds them in the background): a dry run then compares them all."""
    deadline = time.monotonic() + timeout
    while True:
        answer = dry_run(daemon, ns, "a title that is in no way like any other, zebra quartz", kind)
        if answer["status"] != "skipped" and answer["compared"] == answer["of"] == of:
            return
        assert time.monotonic() < deadline, answer
        time.sleep(POLL_S)  # polling for the condition above, not a barrier


def usage_rows(daemon: Daemon, purpose: str, ns: str) -> int:
    # Usage rows are written a moment after the call (write-behind): GET /v1/usage flushes them.
    status, _ = daemon.call("GET", f"/v1/usage?namespace={ns}")
    assert status == 200
    rows = sql(
        daemon.env["RECALLD_STORE_DSN"], "SELECT count(*) FROM usage WHERE purpose = $1 AND namespace = $2", purpose, ns
    )
    return int(rows[0][0])


# -- the real local model


# Titles from the calibration pairs (tests/fixtures/duplicates/pairs.json) whose verdicts the
# default title model gets right with a margin (`recalld calibrate` prints them all).
BACKLOG = ("Export monthly sales report to CSV", "Redefinir senha por e-mail", "Cannot upload files larger than 10 MB")


@pytest.fixture(scope="module")
def backlog(daemon: Daemon) -> str:
    ns = "dupes-backlog"
    for title in BACKLOG:
        create(daemon, ns, title)
    create(daemon, ns, "Export monthly sales report to CSV", kind="rule")  # another kind
    wait_comparable(daemon, ns, 3)
    return ns


def test_a_paraphrase_warns_across_languages_and_the_record_is_created_anyway(daemon: Daemon, backlog: str) -> None:
    created = create(daemon, backlog, "Reset password via email")
    check = created["duplicate_check"]
    assert check["status"] == "warned", check
    assert [s["title"] for s in check["similar"]] == ["Redefinir senha por e-mail"]
    assert check["similar"][0]["score"] >= check["threshold"] == 0.501
    assert check["compared"] == check["of"] == 3
    status, record = daemon.call("GET", f"/v1/records/{created['id']}")
    assert status == 200 and record["title"] == "Reset password via email"


def test_an_adjacent_topic_does_not_warn(daemon: Daemon, backlog: str) -> None:
    check = dry_run(daemon, backlog, "Export monthly sales report to PDF")
    assert check["status"] == "clear", check
    assert "similar" not in check
    assert check["compared"] == check["of"] >= 3


def test_a_neighbour_in_another_language_does_not_warn(daemon: Daemon) -> None:
    # the title model scores this English neighbour 0.611 against the Portuguese title, so it
    # warned until the cross-language stage took 0.18 from it; the translation still warns
    ns = "dupes-across-languages"
    create(daemon, ns, "Redefinir senha por e-mail")
    wait_comparable(daemon, ns, 1)
    check = dry_run(daemon, ns, "Change account email address")
    assert check["status"] == "clear", check
    assert check["compared"] == check["of"] == 1
    assert dry_run(daemon, ns, "Reset password via email")["status"] == "warned"


def test_kinds_and_namespaces_never_cross(daemon: Daemon, backlog: str) -> None:
    title = "Download the sales report for each month as a CSV file"
    assert dry_run(daemon, backlog, title)["status"] == "warned"
    rule = dry_run(daemon, backlog, title, kind="rule")
    assert rule["status"] == "warned" and rule["of"] == 1
    other = dry_run(daemon, "dupes-elsewhere", title)
    assert other == {"status": "clear", "threshold": other["threshold"], "compared": 0, "of": 0}


def test_the_record_itself_and_exact_duplicates_are_not_compared(daemon: Daemon, backlog: str) -> None:
    # The same title, folded differently: an exact duplicate, which the create would refuse.
    check = dry_run(daemon, backlog, "  redefinir SENHA, por e-mail! ")
    assert all(s["title"] != "Redefinir senha por e-mail" for s in check.get("similar", []))
    created = create(daemon, backlog, "Print the shipping label for an order")
    status, updated = daemon.call(
        "PUT",
        f"/v1/records/{created['id']}",
        {"namespace": backlog, "kind": "story", "title": "Print the shipping labels for orders", "body": ""},
    )
    assert status == 200, updated
    ids = [s["id"] for s in updated["duplicate_check"].get("similar", [])]
    assert created["id"] not in ids


def test_an_update_checks_only_a_changed_title(daemon: Daemon, backlog: str) -> None:
    created = create(daemon, backlog, "Archive closed support tickets after a year")
    body = {"namespace": backlog, "kind": "story", "title": "Archive closed support tickets after a year", "body": "x"}
    status, updated = daemon.call("PUT", f"/v1/records/{created['id']}", body)
    assert status == 200 and updated["changed"] and "duplicate_check" not in updated
    body["title"] = "File upload fails for attachments over 10MB"
    status, updated = daemon.call("PUT", f"/v1/records/{created['id']}", body)
    assert status == 200 and updated["duplicate_check"]["status"] == "warned", updated


def test_a_forgotten_record_is_never_similar(daemon: Daemon, backlog: str) -> None:
    created = create(daemon, backlog, "Timeout when generating the yearly tax report")
    wait_comparable(daemon, backlog, dry_run(daemon, backlog, "zz")["of"])
    paraphrase = "Annual tax report generation times out"
    assert created["id"] in [s["id"] for s in dry_run(daemon, backlog, paraphrase).get("similar", [])]
    status, _ = daemon.call("DELETE", f"/v1/records/{created['id']}")
    assert status == 200
    check = dry_run(daemon, backlog, paraphrase)
    assert created["id"] not in [s["id"] for s in check.get("similar", [])]


def test_the_recall_model_can_embed_titles_instead(make_daemon: Any) -> None:
    daemon = make_daemon(env={"RECALLD_DUPLICATES_MODEL": "embedding"})
    create(daemon, "minilm", "Export monthly sales report to CSV")
    wait_comparable(daemon, "minilm", 1)
    check = dry_run(daemon, "minilm", "Download the sales report for each month as a CSV file")
    assert check["status"] == "warned" and check["threshold"] == 0.489, check


def test_capabilities_and_metrics_report_the_check(daemon: Daemon, backlog: str) -> None:
    status, body = daemon.call("GET", "/v1/capabilities")
    assert status == 200
    assert {c["name"]: c["available"] for c in body["capabilities"]}["duplicates.v1"] is True
    status, text = daemon.call("GET", "/metrics")
    assert 'recalld_duplicate_checks_total{reason="",status="warned"}' in text
    assert 'recalld_duplicate_checks_total{reason="",status="clear"}' in text


def test_bad_input_to_the_dry_run_is_a_400(daemon: Daemon) -> None:
    status, body = daemon.call("POST", "/v1/duplicates/check", {"namespace": "n", "kind": "story"})
    assert status == 400 and body["error"]["code"] == "invalid_request"
    status, body = daemon.call("POST", "/v1/duplicates/check", {"namespace": "n", "kind": "story", "title": " "})
    assert status == 400 and body["error"]["code"] == "invalid_value"


# -- a provider the test controls


def cosine(a: str, b: str, dimension: int) -> float:
    """The score the daemon computes for two titles with the loopback provider's vectors (the
    suite's `fake` server, tests/conftest.py)."""
    va = np.asarray(unit_vector(title_text(a), dimension), dtype=np.float32).astype(np.float64)
    vb = np.asarray(unit_vector(title_text(b), dimension), dtype=np.float32).astype(np.float64)
    return round(float(va @ vb), 6)


def test_a_score_equal_to_the_threshold_warns(make_daemon: Any, fake: FakeOpenAI) -> None:
    titles = [f"backlog item number {i}" for i in range(40)]
    new = "the new backlog item"
    scores = sorted((cosine(new, t, fake.dimension), t) for t in titles)
    threshold, at = scores[-3]  # two score above it, one exactly at it
    daemon = make_daemon(
        env={
            **fake.env(),
            "RECALLD_DUPLICATES_THRESHOLDS": f'{{"fake-embedder" = {threshold!r}}}',
            # the titles share a frame ("backlog item"): the cosine alone is what this test controls
            "RECALLD_DUPLICATES_CONTRAST_PENALTY": "0",
        }
    )
    for title in titles:
        create(daemon, "eq", title)
    wait_comparable(daemon, "eq", len(titles))
    check = dry_run(daemon, "eq", new)
    assert check["threshold"] == threshold
    assert [(s["score"], s["title"]) for s in check["similar"]] == [scores[-1], scores[-2], (threshold, at)]


def test_an_outage_skips_with_its_reason_and_the_record_is_created(make_daemon: Any, fake: FakeOpenAI) -> None:
    daemon = make_daemon(env={**fake.env(), "RECALLD_EMBEDDING_BREAKER_FAILURES": "2"})
    create(daemon, "down", "an existing story")
    wait_comparable(daemon, "down", 1)
    fake.down = True
    first = create(daemon, "down", "a story written while the provider is down")
    assert first["duplicate_check"]["status"] == "skipped"
    assert first["duplicate_check"]["reason"] == "provider_down"
    assert first["duplicate_check"]["of"] == 1 and first["duplicate_check"]["compared"] == 0
    status, _ = daemon.call("GET", f"/v1/records/{first['id']}")
    assert status == 200
    create(daemon, "down", "a second story while it is down")  # the breaker opens at two failures
    third = create(daemon, "down", "a third story while it is down")
    assert third["duplicate_check"] == {
        "status": "skipped",
        "reason": "circuit_open",
        "threshold": third["duplicate_check"]["threshold"],
        "compared": 0,
        "of": 3,
    }
    assert "duplicate_check_skipped" in daemon.log_path.read_text()


def test_the_time_cap_skips_with_its_reason(make_daemon: Any, fake: FakeOpenAI) -> None:
    daemon = make_daemon(env={**fake.env(), "RECALLD_DUPLICATES_TIME_CAP_S": "0.5"})
    create(daemon, "slow", "an existing story")
    wait_comparable(daemon, "slow", 1)
    fake.delay_s = 3.0
    created = create(daemon, "slow", "a story checked by a slow provider")
    assert created["duplicate_check"]["status"] == "skipped"
    assert created["duplicate_check"]["reason"] == "time_cap_exceeded"


def test_no_provider_skips_with_its_reason(make_daemon: Any) -> None:
    daemon = make_daemon(env={"RECALLD_EMBEDDING_PROVIDER": "none"})
    created = create(daemon, "none", "a story")
    assert created["duplicate_check"]["status"] == "skipped"
    assert created["duplicate_check"]["reason"] == "no_provider"
    status, body = daemon.call("GET", "/v1/capabilities")
    assert status == 200 and {c["name"]: c["available"] for c in body["capabilities"]}["duplicates.v1"] is False


@pytest.mark.slow
def test_one_embedding_call_per_check_with_a_thousand_records(make_daemon: Any, fake: FakeOpenAI) -> None:
    daemon = make_daemon(env=fake.env())
    stories = [
        {"namespace": "many", "kind": "story", "title": f"story {i} about {i * 7919 % 1000} widgets", "body": ""}
        for i in range(1000)
    ]
    daemon.create_all(stories)  # batches: these writes only set up the checks below
    wait_comparable(daemon, "many", 1000, timeout=300)
    before = usage_rows(daemon, "dedupe", "many")
    calls = fake.calls
    for i in range(5):
        check = create(daemon, "many", f"a brand new story {i}")["duplicate_check"]
        assert check["status"] != "skipped" and check["compared"] == check["of"] == 1000 + i
    assert usage_rows(daemon, "dedupe", "many") - before == 5
    assert fake.calls - calls >= 5


def test_with_nothing_to_compare_a_provider_down_is_still_a_skip(make_daemon: Any) -> None:
    daemon = make_daemon(
        env={
            "RECALLD_EMBEDDING_PROVIDER": "openai",
            "RECALLD_EMBEDDING_URL": "http://127.0.0.1:9/v1",
            "RECALLD_EMBEDDING_MODEL": "nothing-here",
        }
    )
    check = create(daemon, "unreachable", "the first story of its kind")["duplicate_check"]
    assert check["status"] == "skipped" and check["reason"] == "provider_down" and check["of"] == 0


def test_dupes_lists_the_pairs_of_a_namespace(daemon: Daemon, backlog: str) -> None:
    ns = "dupes-audit"
    first = create(daemon, ns, "El pago con PayPal falla")
    second = create(daemon, ns, "PayPal payment fails")
    create(daemon, ns, "Archive closed tickets after a year")
    create(daemon, ns, "PayPal payment fails", kind="rule")  # other kind: not paired
    wait_comparable(daemon, ns, 3)
    env = {**os.environ, "RECALLD_SOCKET": str(daemon.socket)}
    done = subprocess.run(
        [sys.executable, "-m", "daemon", "dupes", "-n", ns, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert [{pair["a"]["id"], pair["b"]["id"]} for pair in answer["pairs"]] == [{first["id"], second["id"]}]
    assert answer["of"] == 4 and answer["compared"] == 4
    assert "compared 4 of 4 records" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "daemon", "dupes", "-n", ns, "--kind", "story"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0 and "1 pairs at or above" in done.stdout, done.stdout


def test_the_title_model_works_without_an_embedding_provider(make_daemon: Any) -> None:
    # No index manager embeds titles then: only the titles checked since are stored and compared.
    daemon = make_daemon(env={"RECALLD_EMBEDDING_PROVIDER": "none", "RECALLD_DUPLICATES_MODEL": "use-multilingual-v3"})
    create(daemon, "titles-only", "Cannot upload files larger than 10 MB")
    second = create(daemon, "titles-only", "Export monthly sales report to CSV")["duplicate_check"]
    assert second["status"] == "clear" and (second["compared"], second["of"]) == (0, 1)
    third = create(daemon, "titles-only", "Download the sales report for each month as a CSV file")["duplicate_check"]
    assert third["status"] == "warned" and (third["compared"], third["of"]) == (1, 2), third
    # a dry run compares as a write's check does, and stores no title vector
    dsn = daemon.env["RECALLD_STORE_DSN"]
    stored = sql(dsn, "SELECT count(*) AS n FROM title_vectors")[0]["n"]
    answer = dry_run(daemon, "titles-only", "Export the monthly sales report as a CSV file")
    # the first title was never embedded: its check had nothing to compare with
    assert answer["status"] == "warned" and (answer["compared"], answer["of"]) == (2, 3), answer
    assert sql(dsn, "SELECT count(*) AS n FROM title_vectors")[0]["n"] == stored == 2


def test_a_model_switch_embeds_every_title_again_in_the_new_space(make_daemon: Any, fake: FakeOpenAI) -> None:
    daemon = make_daemon(env=fake.env(model="model-a"))
    for i in range(5):
        create(daemon, "switch", f"story number {i} of the switch")
    wait_comparable(daemon, "switch", 5)
    dsn = daemon.env["RECALLD_STORE_DSN"]
    daemon.stop()
    switched = make_daemon(env=fake.env(model="model-b"), dsn=dsn)
    wait_comparable(switched, "switch", 5)  # every title has a vector in model-b's space too
    spaces = sql(
        dsn,
        """SELECT s.spec->>'model' AS model, count(t.title_sha256) AS titles
           FROM vector_spaces s LEFT JOIN title_vectors t USING (space_id) GROUP BY 1 ORDER BY 1""",
    )
    assert [(r["model"], r["titles"] >= 5) for r in spaces] == [("model-a", True), ("model-b", True)]


def test_concurrent_writes_and_checks_of_one_kind_stay_in_step(daemon: Daemon) -> None:
    """Creates, retitles, forgets and dry runs of one namespace and kind at once, on four
    connections: every check runs (none is unavailable), and afterwards a check compares with
    exactly the records that are live, as they are titled now."""
    ns = "dupes-concurrent"
    words = "invoice label avatar ledger coupon refund shipment webhook calendar backup".split()
    titles = [f"{verb} the {word}" for verb in ("Archive", "Print", "Rename") for word in words]

    def run(share: list[str]) -> list[dict[str, Any]]:
        answers = []
        transport = httpx.HTTPTransport(uds=str(daemon.socket))
        with httpx.Client(transport=transport, base_url="http://recalld", timeout=60) as http:
            for title in share:
                response = http.post("/v1/records", json={"namespace": ns, "kind": "story", "title": title, "body": ""})
                assert response.status_code == 201, response.text
                answers.append({**response.json(), "sent_title": title})
                check = http.post("/v1/duplicates/check", json={"namespace": ns, "kind": "story", "title": title})
                assert check.status_code == 200, check.text
                answers.append({"duplicate_check": check.json()})
        return answers

    with ThreadPoolExecutor(4) as pool:
        answers = [a for share in pool.map(run, [titles[i::4] for i in range(4)]) for a in share]
    for answer in answers:
        assert answer["duplicate_check"].get("reason") != "duplicate_check_unavailable", answer
    created = [a for a in answers if "id" in a]
    forgotten, retitled = created[:5], created[5:10]

    def change(index: int) -> None:
        status, body = daemon.call("DELETE", f"/v1/records/{forgotten[index]['id']}")
        assert status == 200, body
        new_title = {"namespace": ns, "kind": "story", "title": f"Retitled story number {index}", "body": ""}
        status, body = daemon.call("PUT", f"/v1/records/{retitled[index]['id']}", new_title)
        assert status == 200, body
        dry_run(daemon, ns, f"Something else entirely {index}")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(change, range(5)))
    live = len(titles) - len(forgotten)
    wait_comparable(daemon, ns, live)
    answer = dry_run(daemon, ns, "Retitled story number 3")  # a live title now: its record is excluded
    assert answer["of"] == answer["compared"] == live - 1

    def paraphrase(title: str) -> str:
        """Near the title but not its exact duplicate: a live record of that title is compared
        with it (not excluded as exact) and named as similar."""
        return title.replace(" the ", " our ")

    # the control: a paraphrase of a live record's title names that record
    kept = created[10]
    answer = dry_run(daemon, ns, paraphrase(kept["sent_title"]))
    assert answer["of"] == answer["compared"] == live
    assert kept["id"] in [s["id"] for s in answer.get("similar", [])], answer
    # a paraphrase of a forgotten record's title and of a retitled one's old title: neither
    # record is named (the forgotten one is not compared at all)
    for gone in (forgotten[0], retitled[0]):
        answer = dry_run(daemon, ns, paraphrase(gone["sent_title"]))
        assert answer["of"] == answer["compared"] == live
        assert gone["id"] not in [s["id"] for s in answer.get("similar", [])], answer
