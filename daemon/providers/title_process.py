"""The title model as the daemon runs it: in a process of its own (`title_worker.py` says why and
how the two speak), behind the same provider port as the model run in-process.

- `start_loading` starts the process before the daemon's other start-up work, so that the model
  loads beside it; entering the provider waits for the process to say it is ready.
- A load failure never raises from `__aenter__`, as with any in-process model
  (`InProcessModel`): it surfaces as `provider_unavailable` from `embed()`, and the next
  `embed()` starts a new process (the files may have been installed since). So does a process
  that died (killed, out of memory): one call fails, with its exit status, the next starts anew.
- One request at a time. A caller whose `timeout` passes gets `provider_timeout` at once; the
  process still finishes that request, and the next caller's request waits behind it, as behind
  an abandoned run in-process. Its late answer is recognised by its id and dropped.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.to_thread
import numpy as np
from anyio.abc import UNIXSocketStream

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.ports.embedding import ProviderBatch, ProviderInfo
from recalld.providers.duplicates_model import DIMENSION, MODEL_ID
from recalld.providers.title_worker import READY, frame, take_frame

log = logging.getLogger("recalld.providers")

STOP_S = 5.0
"""How long a stopping daemon waits for the process to end after closing its side, before it
kills it."""


class TitleModelProcess:
    """universal-sentence-encoder-multilingual v3 in a child process (`title_worker.py`)."""

    label = "title model"

    def __init__(self, cache: Path | None = None, *, command: Sequence[str] | None = None) -> None:
        """`cache`: the title model's cache directory (`TitleModelProvider`); `command`: what runs
        the worker, `--fd N` appended (tests start one that fails)."""
        self._cache = cache
        self._command = list(command) if command is not None else self._worker_command()
        self._process: subprocess.Popen[bytes] | None = None
        self._own_end: socket.socket | None = None
        """This side of the socket until the first call wraps it into `_stream`."""
        self._stream: UNIXSocketStream | None = None
        self._buffer = bytearray()
        """What has come from the process and is not yet a whole frame: kept across calls, so
        that a caller cancelled mid-answer leaves no half frame behind."""
        self._ready = False
        self._last_id = READY
        self._lock: anyio.Lock | None = None

    def _worker_command(self) -> list[str]:
        command = [sys.executable, "-m", "recalld.providers.title_worker"]
        return command + (["--cache", str(self._cache)] if self._cache is not None else [])

    def describe(self) -> ProviderInfo:
        return ProviderInfo(provider="local", model=MODEL_ID, max_input_tokens=None, max_concurrency=1)

    @property
    def loaded(self) -> bool:
        """Whether the process runs and said its model is loaded."""
        return self._ready and self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The process's id while it runs."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def start_loading(self) -> None:
        """Start the process, which loads the model at once, unless it runs already."""
        if self._process is not None:
            return
        own, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            # A process group of its own: a Ctrl-C typed at the daemon's terminal is the daemon's
            # to handle (it closes the socket, and the worker ends), not a traceback from here.
            self._process = subprocess.Popen(
                [*self._command, "--fd", str(theirs.fileno())], pass_fds=[theirs.fileno()], process_group=0
            )
        self._own_end, self._stream, self._buffer, self._ready = own, None, bytearray(), False

    def finish_loading(self, timeout: float) -> bool:
        """Nothing to wait for: the load runs in the other process, which ends with its socket."""
        del timeout
        return True

    async def __aenter__(self) -> Self:
        with contextlib.suppress(EmbeddingError):  # kept for `embed()` to report
            async with self._locked():
                await self._started()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close this side (the process then ends) and reap the process."""
        process, stream, own = self._process, self._stream, self._own_end
        self._process, self._stream, self._own_end, self._ready = None, None, None, False
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        if own is not None:
            own.close()
        if process is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_reap, process)

    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        batch = list(texts)
        with anyio.move_on_after(timeout) as scope:
            async with self._locked():
                await self._started()
                stream = await self._connected()
                self._last_id += 1
                ident = self._last_id
                await self._exchange(stream.send(frame([ident, batch])))
                while True:
                    answered, vectors, error = await self._next_frame(stream)
                    if answered == ident:
                        break
                    # an answer to a caller that gave up: dropped
        if scope.cancelled_caught:
            raise EmbeddingError(Reason.PROVIDER_TIMEOUT, f"{self.label} took longer than {timeout:.3f}s")
        if error is not None:
            raise EmbeddingError(Reason.PROVIDER_ERROR, error)
        matrix = np.frombuffer(vectors, dtype="<f4").reshape(len(batch), DIMENSION)
        return ProviderBatch(vectors=matrix, input_tokens=None)

    def _locked(self) -> anyio.Lock:
        if self._lock is None:  # made on first use: an anyio lock belongs to the running loop
            self._lock = anyio.Lock()
        return self._lock

    async def _started(self) -> None:
        """A process that said its model is loaded: the running one, or a new one. Raises
        `provider_unavailable` when it could not load or died."""
        if self._process is not None and self._process.poll() is not None:
            await self._ended()  # died since the last call: this call reports it
        if self._ready:
            return
        self.start_loading()
        _, _, error = await self._next_frame(await self._connected())
        if error is not None:
            await self.aclose()
            raise EmbeddingError(Reason.PROVIDER_UNAVAILABLE, error)
        self._ready = True

    async def _connected(self) -> UNIXSocketStream:
        """This side of the socket as a stream (wrapped on first use: that needs the event loop,
        and the process may have been started before there was one)."""
        if self._stream is None:
            assert self._own_end is not None, "no process started"
            self._stream = await UNIXSocketStream.from_socket(self._own_end)
            self._own_end = None
        return self._stream

    async def _next_frame(self, stream: UNIXSocketStream) -> list[Any]:
        """The next frame from the process; `provider_unavailable` when it ended."""
        while (payload := take_frame(self._buffer)) is None:
            self._buffer += await self._exchange(stream.receive())
        return payload

    async def _exchange(self, step: Any) -> Any:
        """`step` (a send or a receive); the process having ended is `provider_unavailable`."""
        try:
            return await step
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self._ended()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _ended(self) -> None:
        """The process ended: reap it, forget it, and raise why."""
        process = self._process
        await self.aclose()
        status = process.returncode if process is not None else None
        log.warning("the title model's process ended", extra={"event": "title_process_ended", "status": status})
        raise EmbeddingError(Reason.PROVIDER_UNAVAILABLE, f"{self.label} process ended (status {status})")


def _reap(process: subprocess.Popen[bytes]) -> None:
    try:
        process.wait(STOP_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
