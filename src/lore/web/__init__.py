"""``lore serve``: the HTTP API, the MCP endpoint and the knowledge page in one process.

``lore.web.app.create_app`` builds the ASGI app (FastAPI, needs the ``serve`` extra);
``lore.web.tokens`` (standard library only) is what ``lore token`` uses. Nothing is
imported here, so ``lore token`` never pays for the web stack.
"""
