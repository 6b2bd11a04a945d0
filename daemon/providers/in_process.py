"""What the in-process models (the local recall model, the multilingual title model) share: how
they load, keep serving when they cannot, and run one blocking inference under a deadline.

A load failure never raises from `__aenter__`: the daemon must keep serving full-text recall, so
it surfaces as `provider_unavailable` from `embed()` (and so in the embedder's probe), and each
later `embed()` tries to load again (the files may have been installed since). Inference is
CPU-bound, so it runs in a worker thread, one at a time (`_run_lock`: an abandoned, timed-out
run still holds the cores until it ends).
"""

from __future__ import annotations

import functools
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import ClassVar, Self, TypeVar

import anyio
import anyio.to_thread

from recalld.actors.embedding.errors import EmbeddingError, Reason

T = TypeVar("T")


class InProcessModel(ABC):
    label: ClassVar[str]
    """How errors name the model: "local model", "title model"."""

    def __init__(self) -> None:
        self._load_error: EmbeddingError | None = None
        self._run_lock = threading.Lock()
        # One load at a time: the early load (`start_loading`) and the embedder's start (`__aenter__`)
        # race, and the second must wait for the first rather than load the model again.
        self._loading_lock = threading.Lock()
        self._early_load: threading.Thread | None = None

    @property
    @abstractmethod
    def loaded(self) -> bool: ...

    @abstractmethod
    def load(self) -> None:
        """Blocking: load the model; idempotent; raise when it cannot be loaded."""

    @abstractmethod
    def unload(self) -> None: ...

    def start_loading(self) -> None:
        """Begin loading now, in a thread of its own, so that the load overlaps the daemon's other
        start-up work (the other in-process model's load above all: the two used to load one after
        the other, as their embedders start in turn). `__aenter__` waits for it, not loads again."""
        if self._early_load is None:
            self._early_load = threading.Thread(target=self._try_load, name=f"{self.label} load", daemon=True)
            self._early_load.start()

    def finish_loading(self, timeout: float) -> bool:
        """Wait for the early load, if one runs. A daemon that fails to start must wait before it
        exits: the process's exit tears down the model runtime's C++ state under a load still
        running in its thread, which aborts the process (SIGABRT, "terminate called without an
        active exception") instead of letting it exit with its own code. Whether the load is over."""
        if self._early_load is None:
            return True
        self._early_load.join(timeout)
        return not self._early_load.is_alive()

    async def __aenter__(self) -> Self:
        await anyio.to_thread.run_sync(self._try_load)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self.unload()

    def _try_load(self) -> None:
        with self._loading_lock:
            if not self.loaded:
                self._load_once()

    def _load_once(self) -> None:
        try:
            self.load()
            self._load_error = None
        except EmbeddingError as error:
            self._load_error = error
        except Exception as exc:  # the package missing, or the runtime refusing a file
            self._load_error = EmbeddingError(Reason.PROVIDER_UNAVAILABLE, f"{self.label} failed to load: {exc!r}")

    async def _run_timed(self, work: Callable[[threading.Event], T], timeout: float) -> T:  # noqa: ASYNC109
        """`work(abandoned)` in a worker thread, loading the model first if it is not; past
        `timeout` the caller gets `provider_timeout` at once and `abandoned` is set, so work that
        checks it stops between its runs."""
        if not self.loaded:
            await anyio.to_thread.run_sync(self._try_load)
            if self._load_error is not None:
                raise self._load_error
        abandoned = threading.Event()
        try:
            with anyio.move_on_after(timeout) as scope:
                # abandon_on_cancel: the caller gets its timeout now, not when the thread ends.
                result = await anyio.to_thread.run_sync(functools.partial(work, abandoned), abandon_on_cancel=True)
        finally:
            abandoned.set()  # no-op when finished; otherwise stops the thread after its run
        if scope.cancelled_caught:
            raise EmbeddingError(Reason.PROVIDER_TIMEOUT, f"{self.label} took longer than {timeout:.3f}s")
        return result
