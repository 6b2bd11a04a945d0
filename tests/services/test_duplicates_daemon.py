"""Semantic duplicate warnings end to end (docs/DUPLICATES.md): real daemons, the real local model, real
PostgreSQL; a loopback OpenAI-compatible server where the test must control the vectors or the
provider's failures."""

from __future__ import annotations

import json
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from recalld.actors.duplicates.rules import title_key, title_text
from recalld.config import DuplicatesConfig, EmbeddingConfig
from tests.support import ROOT, Daemon, sql
from tests.support.cli import recalld
from tests.support.duplicates import UNLIKE_ANY, dry_run, usage_rows, wait_comparable
from tests.support.embedding_service import EmbeddingServer, vector_for
from tests.support.waits import eventually


def create(daemon: Daemon, ns: str, title: str, kind: str = "story", body: str = "") -> dict[str, Any]:
    status, created = daemon.call("POST", "/v1/records", {"namespace": ns, "kind": kind, "title": title, "body": body})
    assert status == 201, created
    return dict(created)


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


def ran(check: dict[str, Any]) -> dict[str, Any]:
    """The check, once it is known to have run and compared every live title: what it leaves
    out of `similar` it left out by its rules, not because it never compared."""
    assert check["status"] in ("clear", "warned"), check
    assert check["compared"] == check["of"] > 0, check
    return check


def test_the_record_itself_and_exact_duplicates_are_not_compared(daemon: Daemon, backlog: str) -> None:
    live = ran(dry_run(daemon, backlog, UNLIKE_ANY))["of"]
    # The same title, folded differently: an exact duplicate, which the create would refuse. It
    # is not compared at all (one fewer in `of`), so not named.
    check = ran(dry_run(daemon, backlog, "  redefinir SENHA, por e-mail! "))
    assert check["of"] == live - 1, check
    assert all(s["title"] != "Redefinir senha por e-mail" for s in check.get("similar", []))
    created = create(daemon, backlog, "Print the shipping label for an order")
    status, updated = daemon.call(
        "PUT",
        f"/v1/records/{created['id']}",
        {"namespace": backlog, "kind": "story", "title": "Print the shipping labels for orders", "body": ""},
    )
    assert status == 200, updated
    check = ran(updated["duplicate_check"])
    assert check["of"] == live, check  # one more record, itself not compared
    assert created["id"] not in [s["id"] for s in check.get("similar", [])]


def test_an_update_checks_only_a_changed_title(daemon: Daemon, backlog: str) -> None:
    created = create(daemon, backlog, "Archive closed support tickets after a year")
    body = {"namespace": backlog, "kind": "story", "title": "Archive closed support tickets after a year", "body": "x"}
    status, updated = daemon.call("PUT", f"/v1/records/{created['id']}", body)
    assert status == 200 and updated["changed"] and "duplicate_check" not in updated
    body["title"] = "File upload fails for attachments over 10MB"
    status, updated = daemon.call("PUT", f"/v1/records/{created['id']}", body)
    assert status == 200 and updated["duplicate_check"]["status"] == "warned", updated


def test_an_update_that_changes_only_the_kind_is_checked_among_the_new_kinds_titles(
    daemon: Daemon, backlog: str
) -> None:
    title = "Download the sales report for each month as a CSV file"
    created = create(daemon, backlog, title, kind="memo")
    assert created["duplicate_check"]["of"] == 0, "no other memo to compare with"
    body = {"namespace": backlog, "kind": "rule", "title": title, "body": ""}
    status, updated = daemon.call("PUT", f"/v1/records/{created['id']}", body)
    assert status == 200, updated
    check = ran(updated["duplicate_check"])
    assert check["of"] == 1 and [s["title"] for s in check["similar"]] == ["Export monthly sales report to CSV"]


def test_a_forgotten_record_is_never_similar(daemon: Daemon, backlog: str) -> None:
    created = create(daemon, backlog, "Timeout when generating the yearly tax report")
    wait_comparable(daemon, backlog, dry_run(daemon, backlog, "zz")["of"])
    paraphrase = "Annual tax report generation times out"
    assert created["id"] in [s["id"] for s in dry_run(daemon, backlog, paraphrase).get("similar", [])]
    status, _ = daemon.call("DELETE", f"/v1/records/{created['id']}")
    assert status == 200
    check = ran(dry_run(daemon, backlog, paraphrase))
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
    # the title model's calls, beside the recall model's, in series of their own
    texts = dict(re.findall(r'^recalld_embedder_texts_total\{model="([^"]+)",provider="local"\} (\S+)$', text, re.M))
    assert (
        set(texts) == {"all-MiniLM-L6-v2-onnx-int8", "use-multilingual-v3"} and float(texts["use-multilingual-v3"]) > 0
    )


def test_bad_input_to_the_dry_run_is_a_400(daemon: Daemon) -> None:
    status, body = daemon.call("POST", "/v1/duplicates/check", {"namespace": "n", "kind": "story"})
    assert status == 400 and body["error"]["code"] == "invalid_request"
    status, body = daemon.call("POST", "/v1/duplicates/check", {"namespace": "n", "kind": "story", "title": " "})
    assert status == 400 and body["error"]["code"] == "invalid_value"


# -- a provider the test controls


def cosine(a: str, b: str, dimension: int) -> float:
    """The score the daemon computes for two titles with the loopback provider's vectors (the
    suite's `fake` server, tests/conftest.py)."""
    va = np.asarray(vector_for(title_text(a), dimension), dtype=np.float32).astype(np.float64)
    vb = np.asarray(vector_for(title_text(b), dimension), dtype=np.float32).astype(np.float64)
    return round(float(va @ vb), 6)


def test_a_score_equal_to_the_threshold_warns(make_daemon: Any, fake: EmbeddingServer) -> None:
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


def test_an_outage_skips_with_its_reason_and_the_record_is_created(make_daemon: Any, fake: EmbeddingServer) -> None:
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


def test_the_time_cap_skips_with_its_reason(make_daemon: Any, fake: EmbeddingServer) -> None:
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
def test_one_embedding_call_per_check_with_a_thousand_records(make_daemon: Any, fake: EmbeddingServer) -> None:
    daemon = make_daemon(env=fake.env())
    stories = [
        {"namespace": "many", "kind": "story", "title": f"story {i} about {i * 7919 % 1000} widgets", "body": ""}
        for i in range(1000)
    ]
    daemon.create_all(stories)  # batches: these writes only set up the checks below
    wait_comparable(daemon, "many", 1000, timeout=300)
    before = usage_rows(daemon, "dedupe", "many")
    calls = len(fake.calls)
    for i in range(5):
        check = create(daemon, "many", f"a brand new story {i}")["duplicate_check"]
        assert check["status"] != "skipped" and check["compared"] == check["of"] == 1000 + i
    assert usage_rows(daemon, "dedupe", "many") - before == 5
    assert len(fake.calls) - calls >= 5


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
    done = recalld(daemon, "dupes", "-n", ns, "--json", check=True)
    answer = json.loads(done.stdout)
    assert [{pair["a"]["id"], pair["b"]["id"]} for pair in answer["pairs"]] == [{first["id"], second["id"]}]
    assert answer["of"] == 4 and answer["compared"] == 4
    assert "compared 4 of 4 records" in done.stderr
    done = recalld(daemon, "dupes", "-n", ns, "--kind", "story", check=True)
    assert "1 pairs at or above" in done.stdout, done.stdout


def test_the_title_model_works_without_an_embedding_provider(make_daemon: Any) -> None:
    # No index manager embeds titles then: the checks embed and store them.
    daemon = make_daemon(env={"RECALLD_EMBEDDING_PROVIDER": "none", "RECALLD_DUPLICATES_MODEL": "use-multilingual-v3"})
    create(daemon, "titles-only", "Cannot upload files larger than 10 MB")  # nothing to compare: no call
    dsn = daemon.env["RECALLD_STORE_DSN"]
    assert sql(dsn, "SELECT count(*) AS n FROM title_vectors")[0]["n"] == 0
    # the first title, which has no vector, is embedded in the second's call
    second = create(daemon, "titles-only", "Export monthly sales report to CSV")["duplicate_check"]
    assert second["status"] == "clear" and (second["compared"], second["of"]) == (1, 1), second
    third = create(daemon, "titles-only", "Download the sales report for each month as a CSV file")["duplicate_check"]
    assert third["status"] == "warned" and (third["compared"], third["of"]) == (2, 2), third
    # the checks' vectors are stored after their answers
    eventually(lambda: sql(dsn, "SELECT count(*) AS n FROM title_vectors")[0]["n"], 30, "3 stored", accept=(3).__eq__)
    # a dry run compares as a write's check does, and stores no title vector
    answer = dry_run(daemon, "titles-only", "Export the monthly sales report as a CSV file")
    assert answer["status"] == "warned" and (answer["compared"], answer["of"]) == (3, 3), answer
    # a create after it: once its vector is stored, so would the dry run's have been
    fourth = "Archive closed tickets after a year"
    create(daemon, "titles-only", fourth)
    key = title_key(title_text(fourth))
    count = "SELECT count(*) AS n FROM title_vectors WHERE title_sha256 = $1"
    eventually(lambda: sql(dsn, count, key)[0]["n"], 30, "the fourth title's vector stored")
    assert sql(dsn, "SELECT count(*) AS n FROM title_vectors")[0]["n"] == 4


def test_a_model_switch_embeds_every_title_again_in_the_new_space(make_daemon: Any, fake: EmbeddingServer) -> None:
    daemon = make_daemon(env=fake.env(model="model-a"))
    for i in range(5):
        create(daemon, "switch", f"story number {i} of the switch")
    wait_comparable(daemon, "switch", 5)
    dsn = daemon.env["RECALLD_STORE_DSN"]
    daemon.stop()
    make_daemon(env=fake.env(model="model-b"), dsn=dsn)

    def stored() -> list[tuple[str, bool]]:
        spaces = sql(
            dsn,
            """SELECT s.spec->>'model' AS model, count(t.title_sha256) AS titles
               FROM vector_spaces s LEFT JOIN title_vectors t USING (space_id) GROUP BY 1 ORDER BY 1""",
        )
        return [(r["model"], r["titles"] >= 5) for r in spaces]

    # the index manager embeds every title in model-b's space too (no check runs here)
    wanted = [("model-a", True), ("model-b", True)]
    eventually(stored, 120, "every title embedded in both spaces", accept=lambda seen: seen == wanted)


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


# -- a twin written a moment ago (its title vector not built yet)

TWINS = (
    # The title model scores this paraphrase 0.722. It shares "invoices" and "pdf" and says the
    # rest in two and three other words: fewer words in common than a side's slot, so no frame,
    # and the contrast stage takes nothing from it.
    ("Users can export their invoices as PDF", "Allow downloading invoices in PDF format"),
    ("Lock the screen after ten minutes without activity", "Automatically lock the screen when idle for 10 minutes"),
    ("Email the customer when their order ships", "Send customers an email once the order has shipped"),
)


@pytest.mark.parametrize(("first", "second"), TWINS)
def test_a_paraphrase_written_straight_after_its_twin_is_compared_with_it(
    daemon: Daemon, first: str, second: str
) -> None:
    """Agents write in bursts: the first title has no stored vector yet when the second is
    checked (the index manager builds it a moment later). The check embeds it in its own call,
    and the paraphrase warns."""
    ns = f"twins-{title_text(first).replace(' ', '-')[:40]}"
    twin = create(daemon, ns, first)
    check = create(daemon, ns, second)["duplicate_check"]
    assert (check["compared"], check["of"]) == (1, 1), check
    assert check["status"] == "warned", check
    assert [s["id"] for s in check["similar"]] == [twin["id"]]
    assert check["similar"][0]["score"] >= check["threshold"]
    assert usage_rows(daemon, "dedupe", ns) == 1  # one embedding call, the first create made none


def test_a_batch_sees_a_title_written_a_moment_before_it(make_daemon: Any) -> None:
    # No index manager (no embedding provider, the title model only): the twin's title has no
    # stored vector unless the batch's check embeds it, however long the test takes.
    daemon = make_daemon(env={"RECALLD_EMBEDDING_PROVIDER": "none", "RECALLD_DUPLICATES_MODEL": "use-multilingual-v3"})
    ns = "twins-batch"
    twin = create(daemon, ns, "Email the customer when their order ships")
    record = {
        "namespace": ns,
        "kind": "story",
        "title": "Send customers an email once the order has shipped",
        "body": "",
    }
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": [record]})
    assert status == 200 and answer["created"] == 1, answer
    check = answer["results"][0]["duplicate_check"]
    assert check["status"] == "warned" and (check["compared"], check["of"]) == (1, 1), check
    assert [s["id"] for s in check["similar"]] == [twin["id"]]
    assert usage_rows(daemon, "dedupe", ns) == 1


@pytest.mark.parametrize(
    ("setting", "bound"),
    [
        (None, DuplicatesConfig().catch_up_titles),  # the default: with the new title, one call of max_batch
        ("5", 5),
        ("100", EmbeddingConfig().max_batch - 1),  # more than a call holds: the call's size bounds it
    ],
)
def test_titles_without_a_vector_beyond_the_bound_are_counted_not_compared(
    make_daemon: Any, fresh_dsn: str, setting: str | None, bound: int
) -> None:
    """A check embeds at most `[duplicates] catch_up_titles` titles that have no stored vector
    yet, with its own, in one call; the others are in `of`, not in `compared`, until a later
    check (or the index manager) has embedded them."""
    # Written with no title model at all (and no index manager): no title has a vector.
    unvectored = make_daemon(
        env={"RECALLD_EMBEDDING_PROVIDER": "none", "RECALLD_DUPLICATES_MODEL": "embedding"}, dsn=fresh_dsn
    )
    stories = [
        {"namespace": "bound", "kind": "story", "title": f"Story {i}: {word} the {thing}", "body": ""}
        for i, (word, thing) in enumerate(
            (w, t)
            for w in ("archive", "print", "rename", "share", "star", "pin", "mute", "tag")
            for t in ("invoice", "label", "avatar", "ledger", "coupon")
        )
    ]
    unvectored.create_all(stories)
    unvectored.stop()
    # The title model alone: still no index manager, so only checks embed titles.
    env = {"RECALLD_EMBEDDING_PROVIDER": "none", "RECALLD_DUPLICATES_MODEL": "use-multilingual-v3"}
    if setting is not None:
        env["RECALLD_DUPLICATES_CATCH_UP_TITLES"] = setting
    daemon = make_daemon(env=env, dsn=fresh_dsn)
    first = create(daemon, "bound", "Export the yearly tax report")["duplicate_check"]
    assert first["status"] != "skipped", first
    assert (first["compared"], first["of"]) == (bound, len(stories)), first
    assert usage_rows(daemon, "dedupe", "bound") == 1  # one call for the new title and the bound's
    # the next check takes the next ones, and compares with the first check's title too
    second = create(daemon, "bound", "Import the product catalogue")["duplicate_check"]
    assert second["status"] != "skipped", second
    assert second["of"] == len(stories) + 1, second
    assert second["compared"] == min(len(stories), 2 * bound) + 1, second
    assert usage_rows(daemon, "dedupe", "bound") == 2


# -- documents: titles made from file names are not checked


def test_a_record_of_an_unchecked_kind_is_skipped_and_never_compared(daemon: Daemon) -> None:
    ns = "dupes-unchecked-kind"
    doc = create(daemon, ns, "Export monthly sales report to CSV", kind="doc")["duplicate_check"]
    assert doc["status"] == "skipped" and doc["reason"] == "kind_not_checked", doc
    assert (doc["compared"], doc["of"]) == (0, 0)
    again = create(daemon, ns, "Download the sales report for each month as a CSV file", kind="doc")
    assert again["duplicate_check"]["reason"] == "kind_not_checked", again
    assert dry_run(daemon, ns, "Sales report as CSV", kind="doc")["reason"] == "kind_not_checked"
    # comparisons stay within a kind: a story is compared with stories only
    story = create(daemon, ns, "Export the monthly sales report as a CSV file")["duplicate_check"]
    assert story == {"status": "clear", "threshold": story["threshold"], "compared": 0, "of": 0}, story
    assert (
        'recalld_duplicate_checks_total{reason="kind_not_checked",status="skipped"}'
        in daemon.call("GET", "/metrics")[1]
    )


def test_the_unchecked_kinds_are_configured_per_kind(make_daemon: Any) -> None:
    daemon = make_daemon(
        env={
            "RECALLD_EMBEDDING_PROVIDER": "none",
            "RECALLD_DUPLICATES_MODEL": "use-multilingual-v3",
            "RECALLD_DUPLICATES_UNCHECKED_KINDS": '["rule"]',
        }
    )
    create(daemon, "per-kind", "Export monthly sales report to CSV", kind="doc")
    doc = create(daemon, "per-kind", "Download the sales report for each month as a CSV file", kind="doc")
    assert doc["duplicate_check"]["status"] == "warned", doc
    create(daemon, "per-kind", "Export monthly sales report to CSV", kind="rule")
    rule = create(daemon, "per-kind", "Download the sales report for each month as a CSV file", kind="rule")
    assert rule["duplicate_check"]["reason"] == "kind_not_checked", rule


def documentation(root: Path) -> int:
    """A folder of real documentation, as `recalld ingest` meets it: the READMEs of installed
    packages (most have no heading, so their titles are their file names) and two releases of
    this project's own docs (the same headings in two folders). How many files."""
    copied = 0
    for readme in sorted(Path("/usr/share/doc").glob("*/README*")):
        if copied == 24:
            break
        if readme.suffix == ".gz" or not readme.is_file() or readme.stat().st_size > 16_384:
            continue
        try:
            text = readme.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        (root / readme.parent.name).mkdir(exist_ok=True)
        (root / readme.parent.name / readme.name).write_text(text, encoding="utf-8")
        copied += 1
    for release in ("release-1", "release-2"):
        (root / release).mkdir()
        for doc in ("CONTRIBUTING.md", "docs/EVAL.md", "docs/RELIABILITY.md"):
            (root / release / Path(doc).name).write_text((ROOT / doc).read_text(encoding="utf-8"), encoding="utf-8")
            copied += 1
    return copied


def checks_counted(daemon: Daemon) -> dict[tuple[str, str], float]:
    """recalld_duplicate_checks_total by (status, reason)."""
    text = daemon.call("GET", "/metrics")[1]
    found = re.findall(r'^recalld_duplicate_checks_total\{reason="(\w*)",status="(\w+)"\} (\S+)$', text, re.M)
    return {(status, reason): float(count) for reason, status, count in found}


def test_ingested_documentation_warns_on_nothing_and_dupes_lists_nothing(
    make_daemon: Any, fake: EmbeddingServer
) -> None:
    # the titles by the real title model; the bodies' chunks by the loopback provider (cheap)
    daemon = make_daemon(env={**fake.env(), "RECALLD_DUPLICATES_MODEL": "use-multilingual-v3"})
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        files = documentation(root)
        ingested = json.loads(recalld(daemon, "ingest", str(root), "-n", "manuals", "--json", check=True).stdout)
        assert ingested["created"] == files and not ingested["failed"], ingested
        counted = checks_counted(daemon)
        assert counted.get(("skipped", "kind_not_checked")) == files, counted
        assert ("warned", "") not in counted and ("clear", "") not in counted, counted
        audit = json.loads(recalld(daemon, "dupes", "-n", "manuals", "--json", check=True).stdout)
        assert audit["pairs"] == [] and audit["of"] == 0, audit
        assert audit["not_checked"] == files and audit["unchecked_kinds"] == ["doc"], audit
        assert (
            f"{files} records of kinds not checked"
            in recalld(daemon, "dupes", "-n", "manuals", "-q", check=True).stdout
        )
        # The control: the same files written as a kind that is checked do warn, and pair up.
        recalld(daemon, "ingest", str(root), "-n", "manuals-as-stories", "--kind", "story", "--json", check=True)
    counted = checks_counted(daemon)
    assert counted.get(("warned", ""), 0) >= 1, counted
    stories = json.loads(recalld(daemon, "dupes", "-n", "manuals-as-stories", "--json", check=True).stdout)
    assert stories["pairs"] and stories["not_checked"] == 0, stories


# -- metering


def test_the_checks_embedding_is_system_usage_never_a_namespaces(daemon: Daemon) -> None:
    ns = "dupes-metered"
    create(daemon, ns, "Export monthly sales report to CSV")
    create(daemon, ns, "Archive closed support tickets after a year")
    assert usage_rows(daemon, "dedupe", ns) == 1  # the second create's check
    status, usage = daemon.call("GET", f"/v1/usage?namespace={ns}")
    assert status == 200
    assert "dedupe" not in {row["purpose"] for row in usage["usage"]}, usage
    assert [(r["namespace"], r["calls"]) for r in usage["system"] if r["purpose"] == "dedupe"] == [(ns, 1)], usage
    clients = usage["usage"]
    assert usage["totals"]["calls"] == sum(r["calls"] for r in clients)
    assert usage["totals"]["input_tokens"] == sum(r["input_tokens"] for r in clients)
    # `recalld usage -n NS` lists the check's row too, and totals the client's work only (one
    # answer: the indexer may write more rows meanwhile)
    *rows, totals = recalld(daemon, "usage", "-n", ns, check=True).stdout.splitlines()
    printed = [line.split() for line in rows[1:]]
    assert [p[3] for p in printed if p[1] == "dedupe"] == ["1"], rows
    client_calls = sum(int(p[3]) for p in printed if p[1] != "dedupe")
    assert totals.startswith(f"client totals: {client_calls} calls, "), (rows, totals)
