"""The start-up probe: one fixed text embedded to learn the provider's vector space."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import anyio

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.embedding.meter import Meter
from recalld.actors.embedding.settings import EmbedderSettings, ProbeResult
from recalld.actors.embedding.validation import is_normalized, validate_batch
from recalld.actors.ports.embedding import EmbeddingProvider, ProviderInfo, VectorSpace

log = logging.getLogger("recalld.embedder")

PROBE_TEXT = "recalld start-up probe: a short English sentence about searching notes by meaning."
"""Fixed, so that every probe of a space embeds the same input."""


class Prober:
    """Learns the vector space the provider produces, by embedding :data:`PROBE_TEXT`.

    Guarantees: `space` is None until a probe has produced a valid vector (finite, non-zero; its
    length is the dimension, and whether it is unit-norm decides `normalized`), and then never
    changes until `reset`; `result` says what the last probe saw (`pass` exactly when it produced
    a space) for /readyz; every probe that reached the provider is metered. `reprobe` retries
    with exponential backoff, from `probe_retry_s` up to max(probe_retry_s, breaker_reset_s),
    until a probe passes.
    """

    def __init__(
        self,
        provider: EmbeddingProvider,
        info: ProviderInfo,
        settings: EmbedderSettings,
        meter: Meter,
        clock: Callable[[], float],
    ) -> None:
        self._provider = provider
        self._info = info
        self._settings = settings
        self._meter = meter
        self._clock = clock
        self.space: VectorSpace | None = None
        self.result: ProbeResult | None = None
        self.attempts = 0

    def reset(self) -> None:
        """Forget the space: a restarted embedder probes afresh (the provider may have changed)."""
        self.space, self.result = None, None

    async def probe_once(self) -> bool:
        s, info = self._settings, self._info
        self.attempts += 1
        started = self._clock()
        timeout = s.probe_timeout_s or s.timeout_s
        dimension: int | None = None
        normalized: bool | None = None
        try:
            try:
                result = await self._provider.embed([PROBE_TEXT], timeout=timeout)
            except EmbeddingError:
                raise
            except Exception as exc:
                raise EmbeddingError(Reason.PROVIDER_ERROR, repr(exc)) from exc
            self._meter.probe(result, PROBE_TEXT)
            matrix = validate_batch(result.vectors, expected_count=1, dimension=None, normalized=False)
            dimension = int(matrix.shape[1])
            normalized = is_normalized(matrix, tolerance=s.norm_tolerance)
        except EmbeddingError as error:
            self.result = self._result(
                started, dimension, normalized, None, reason=error.reason.value, message=error.message
            )
            log.warning(
                "embedding probe failed",
                extra={"reason": error.reason.value, "provider": info.provider, "model": info.model},
            )
            return False
        space = VectorSpace(
            provider=info.provider,
            model=info.model,
            dimension=dimension,
            normalized=normalized,
            template_version=s.template_version,
            builder_version=s.builder_version,
        )
        self.space = space
        self.result = self._result(started, dimension, normalized, space, message=f"probe ok: {space.describe()}")
        log.info(
            "embedding probe passed",
            extra={
                "space": space.key,
                "provider": info.provider,
                "model": info.model,
                "dimension": dimension,
            },
        )
        return True

    async def reprobe(self) -> None:
        wait = self._settings.probe_retry_s
        while self.space is None:
            await anyio.sleep(wait)
            if await self.probe_once():
                return
            wait = min(wait * 2, max(self._settings.probe_retry_s, self._settings.breaker_reset_s))

    def _result(
        self,
        started: float,
        dimension: int | None,
        normalized: bool | None,
        space: VectorSpace | None,
        *,
        message: str,
        reason: str | None = None,
    ) -> ProbeResult:
        """What /readyz shows of a probe: `pass` exactly when it produced a space."""
        info = self._info
        return ProbeResult(
            status="pass" if space is not None else "fail",
            reason=reason,
            message=message,
            provider=info.provider,
            model=info.model,
            dimension=dimension,
            normalized=normalized,
            max_input_tokens=info.max_input_tokens,
            latency_ms=(self._clock() - started) * 1000,
            attempts=self.attempts,
            at=datetime.now(UTC),
            space=space,
        )
