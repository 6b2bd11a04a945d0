"""Recall over the socket orders records it scored exactly alike by source path, never by their
random record ids: the same files indexed again answer in the same order, so an eval's count does not change
between two runs of the same code."""

from __future__ import annotations

from tests.support import Daemon

PATHS = ["/docs/f.md", "/docs/b.md", "/docs/e.md", "/docs/a.md", "/docs/d.md", "/docs/c.md"]


def test_records_scored_alike_come_back_in_source_path_order(daemon: Daemon, ns: str) -> None:
    # Six pages alike but for their path: full text scores them exactly alike (one shared rank),
    # so only the tie-break orders them. Random ids put six in path order once in 720 runs.
    for path in PATHS:
        status, body = daemon.call(
            "POST",
            "/v1/records",
            {
                "namespace": ns,
                "kind": "doc",
                "title": f"Standby settings, part {path[6]}",  # titles must differ; none holds the query
                "body": "wal_keep_size sets the minimum size of past WAL files kept for standbys.",
                "source_path": path,
            },
        )
        assert status == 201, body
    for k in (6, 2):  # 2: the first page read back (k records) must not cut the tie short
        status, answer = daemon.call(
            "POST", "/v1/recall", {"namespace": ns, "query": "wal_keep_size", "routes": ["fts"], "k": k}
        )
        assert status == 200, answer
        assert len({hit["score"] for hit in answer["results"]}) == 1, answer["results"]
        assert [hit["source_path"] for hit in answer["results"]] == sorted(PATHS)[:k]
