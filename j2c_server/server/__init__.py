"""The Jupyter server extension: the app, the REST handlers and the websocket stream. The only
modules that import jupyter_server or tornado; nothing imports them but the extension entry."""
