"""What every request type shares."""

from __future__ import annotations

import msgspec


class Request(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A request body: a field the route does not know is refused (a 400 naming it), never
    ignored, so a client's typo cannot pass for an option."""
