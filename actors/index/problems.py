"""Why the vector route cannot answer: a stable reason code and a message for people."""

from __future__ import annotations

from recalld.actors.index.manifest import IndexReason

Problem = tuple[str, str]
"""(reason code, message): why the vector route cannot answer."""

NOTHING_INDEXED: Problem = (IndexReason.NO_VERIFIED_GENERATION, "nothing is indexed yet")
REBUILDING_AFTER_RESTORE: Problem = (
    IndexReason.VECTOR_SPACE_REBUILDING,
    "the index is being rebuilt from the stored vectors (the generations are not restored with the database)",
)


class IndexUnavailable(Exception):
    """The vector route cannot answer now; `reason` is a stable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
