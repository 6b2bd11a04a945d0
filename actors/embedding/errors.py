"""The one set of reason codes for everything that can go wrong on the embedding path.

Callers (recall, dedupe, the index manager) turn a failure into a degraded route or a skipped
check; they switch on `EmbeddingError.reason`, never on the message, so the codes are stable.
"""

from __future__ import annotations

from enum import StrEnum

from recalld.actors.kernel.breaker import CircuitOpen


class Reason(StrEnum):
    """Stable snake_case reason codes (they reach /readyz, `degraded_routes` and metrics)."""

    # A vector the provider returned is unusable; nothing from that batch is stored.
    EMBEDDING_COUNT_MISMATCH = "embedding_count_mismatch"
    EMBEDDING_DIMENSION_MISMATCH = "embedding_dimension_mismatch"
    EMBEDDING_NOT_FINITE = "embedding_not_finite"
    EMBEDDING_ZERO_VECTOR = "embedding_zero_vector"
    EMBEDDING_NOT_NORMALIZED = "embedding_not_normalized"
    # The provider itself failed.
    PROVIDER_TIMEOUT = "provider_timeout"
    PROVIDER_ERROR = "provider_error"
    """The provider answered with a server error (HTTP 5xx) or failed internally."""
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    """The provider could not be reached or loaded (connection refused, model missing)."""
    PROVIDER_REJECTED = "provider_rejected"
    """The provider refused the request itself (HTTP 401, 403, 404 and other 4xx: credentials,
    an unknown model)."""
    INPUT_REJECTED = "input_rejected"
    """The provider refused the inputs (HTTP 400, 413, 422: too long, content it will not embed).
    Not a verdict on the provider: its other callers' inputs are tried without them."""
    PROVIDER_RESPONSE_INVALID = "provider_response_invalid"
    """The answer was not the wire format (not JSON, fields missing, bad `index` values)."""
    # The embedder declined to call the provider.
    CIRCUIT_OPEN = "circuit_open"
    RATE_LIMITED = "rate_limited"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    EMBEDDER_NOT_READY = "embedder_not_ready"
    """The actor is not running (starting, restarting, stopped) or has no vector space yet."""
    NO_PROVIDER = "no_provider"
    """`[embedding] provider = "none"`: vector features are off by configuration."""


# Failures that say something about the provider's health and so count towards the breaker.
# Circuit/rate/deadline rejections are the embedder's own decisions and never do.
PROVIDER_FAULTS = frozenset(
    {
        Reason.EMBEDDING_COUNT_MISMATCH,
        Reason.EMBEDDING_DIMENSION_MISMATCH,
        Reason.EMBEDDING_NOT_FINITE,
        Reason.EMBEDDING_ZERO_VECTOR,
        Reason.EMBEDDING_NOT_NORMALIZED,
        Reason.PROVIDER_TIMEOUT,
        Reason.PROVIDER_ERROR,
        Reason.PROVIDER_UNAVAILABLE,
        Reason.PROVIDER_REJECTED,
        Reason.PROVIDER_RESPONSE_INVALID,
    }
)


class EmbeddingError(Exception):
    """An embedding request failed; `reason` is the stable code, `message` is for people."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message

    @property
    def provider_fault(self) -> bool:
        """True when the failure counts against the provider (the circuit breaker)."""
        return self.reason in PROVIDER_FAULTS


def refused_by_circuit(refusal: CircuitOpen) -> EmbeddingError:
    """The embedding path's own error for a call the provider's breaker refused."""
    return EmbeddingError(Reason.CIRCUIT_OPEN, str(refusal))
