"""recalld: a local semantic-recall daemon, and its Python client.

    from recalld import Client
    with Client() as recalld:                      # $RECALLD_SOCKET, else the default socket
        recalld.create_record("team", "rule", "Refunds need two approvals", "Above 500 EUR.")

`Client`, `AsyncClient` and `ClientError` are `recalld.client`'s, loaded when first asked for:
importing `recalld` for the daemon's own modules does not load the client, and the client loads
nothing of the daemon (README.md, "Use it").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recalld.client import AsyncClient, Client, ClientError

__all__ = ["AsyncClient", "Client", "ClientError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from recalld import client

        return getattr(client, name)
    raise AttributeError(f"module 'recalld' has no attribute {name!r}")
