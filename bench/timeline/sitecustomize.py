"""Timing hooks for bench/recall_timeline.py, loaded by Python at start-up from PYTHONPATH.

Inert unless BENCH_RECALL_TIMELINE names a file (not RECALLD_*: the daemon refuses variables
it does not know). Then each `POST /v1/recall` appends one line to it: for each step of the
recall path below (public names only), when it first started and last ended (a step called
more than once, such as a search of the base and then of a delta, covers all its calls), as
offsets in ms from the handler's start on time.perf_counter(), the same clock in every thread.

The hooks only time functions: no argument or result changes. They do cost something: a clock
read and a lock per step, and a writer thread that appends each request's line after its answer
and may run beside the next request. So a hooked daemon is a little slower than a plain one.
Meant for one client at a time: the spans of concurrent requests would mix.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

PATH = os.environ.get("BENCH_RECALL_TIMELINE")
_spans: list[tuple[str, float, float]] = []
_lock = threading.Lock()
_lines: queue.SimpleQueue[str] = queue.SimpleQueue()


def _write_lines() -> None:
    """Append each request's line in a thread of its own: a write on the loop would delay the
    answer it describes."""
    while True:
        line = _lines.get()
        with open(PATH, "a") as out:  # type: ignore[arg-type]
            out.write(line + "\n")


def _record(name: str, started: float) -> None:
    with _lock:
        _spans.append((name, started, time.perf_counter()))


def _timed_async(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            _record(name, started)

    return wrapper


def _timed_sync(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _record(name, started)

    return wrapper


def _handler(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The recall route's handler: its span, then one line with every span since it began."""

    @functools.wraps(fn)
    async def wrapper(request: Any) -> Any:
        global _spans
        with _lock:
            _spans = []
        started = time.perf_counter()
        try:
            return await fn(request)
        finally:
            _record("handler", started)
            with _lock:
                spans, _spans = _spans, []
            line: dict[str, list[float]] = {}
            for name, a, b in spans:  # in the order the calls ended
                first = line.setdefault(name, [round((a - started) * 1000, 4), 0.0])
                first[0] = min(first[0], round((a - started) * 1000, 4))
                first[1] = round((b - started) * 1000, 4)
            _lines.put(json.dumps(line))

    return wrapper


def install() -> None:
    from recalld.actors.embedding.embedder import Embedder
    from recalld.actors.index.handle import Handle
    from recalld.actors.index.manager import IndexManager
    from recalld.actors.index.vectors import VectorSet
    from recalld.actors.recall.policy import RecallPolicy
    from recalld.control.routes import records as routes
    from recalld.providers.local import LocalProvider
    from recalld.services.recall import RecallService
    from recalld.services.recall_vector import VectorRoute
    from recalld.store import search

    # Replaced before the app is made: `routes.install` adds the handler by its global name.
    routes.recall = _handler(routes.recall)
    RecallService.recall = _timed_async("recall", RecallService.recall)  # type: ignore[method-assign]
    VectorRoute.__call__ = _timed_async("vector route", VectorRoute.__call__)  # type: ignore[method-assign]
    Embedder.embed = _timed_async("embedder.embed", Embedder.embed)  # type: ignore[method-assign]
    LocalProvider.embed = _timed_async("provider call", LocalProvider.embed)  # type: ignore[method-assign]
    LocalProvider.encode = _timed_sync("model run (worker thread)", LocalProvider.encode)  # type: ignore[method-assign]
    IndexManager.search = _timed_async("index search", IndexManager.search)  # type: ignore[method-assign]
    Handle.search = _timed_sync("handle search", Handle.search)  # type: ignore[method-assign]
    VectorSet.search = _timed_sync("FAISS search", VectorSet.search)  # type: ignore[method-assign]
    search.full_text = _timed_async("full-text statement", search.full_text)
    search.rehydrate = _timed_async("rehydrate statement", search.rehydrate)
    RecallPolicy.fuse = _timed_sync("fusion", RecallPolicy.fuse)  # type: ignore[method-assign]


if PATH:
    install()
    threading.Thread(target=_write_lines, name="timeline writer", daemon=True).start()
