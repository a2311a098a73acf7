"""The wire contract in pydantic: ``manifest`` (what ``j2c-unpack`` validates) and ``api`` (jobs,
events, requests and the server's config), the TypeScript types exported from them, and the
websocket's event frames."""
