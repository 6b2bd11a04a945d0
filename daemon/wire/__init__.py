"""The control socket's wire types, shared by the server and its clients.

msgspec Structs only: every module here imports msgspec and the standard library, nothing of
the server, so a client (`recalld.client`, the CLI's client commands) loads none of it. Requests
are strict (`base.Request`: unknown fields refused, keyword-only); answers are what the routes
send. Decoding a request into these, and checking it against the configured limits, is the
server's part (`recalld.control.decoding`). docs/API.md describes each route.
"""
